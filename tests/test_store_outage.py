"""An S3 endpoint going away for a few seconds inside a running query, and for longer.

The S3 server process is SIGKILLed at an exact request (a task's read of an
input file; the file sink's manifest PUT, applied but its answer lost) and
started again on the same port with the same objects 5 s later
(:meth:`firesteel.testing.s3.S3Server.outage`): the query rides it out, and the
output read back with pyarrow's own dataset reader and boto3 holds every row
once. Past ``fs.s3a.retry.timeout.ms`` the source and the sink fail with a
StorageError naming the endpoint and the setting.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from files_helpers import rows, run_available_now

from firesteel.core.durable import create_record, read_record
from firesteel.core.errors import StorageError
from firesteel.core.options import parse_options
from firesteel.core.spi import ReadLimit
from firesteel.core.storage import StorageConfig
from firesteel.files.source import FilesSource
from firesteel.files.source.options import FilesSourceOptions
from firesteel.testing.s3 import S3Server

OUTAGE_S = 5.0
FILES = 6
ROWS_PER_FILE = 100


@pytest.fixture
def own_s3(tmp_path: Path) -> Iterator[S3Server]:
    """An S3 server of this test alone: it is killed and restarted."""
    server = S3Server(tmp_path / "s3").start()
    try:
        yield server
    finally:
        server.stop()


def put_inputs(server: S3Server, bucket: str) -> None:
    for i in range(FILES):
        table = rows(i * ROWS_PER_FILE, ROWS_PER_FILE)
        with server.filesystem().open_output_stream(f"{bucket}/in/f{i}.parquet") as out:
            pq.write_table(table, out)


def wait_closed(server: S3Server, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not server.closed():
        assert time.monotonic() < deadline, "the armed request never came"
        time.sleep(0.05)


def test_a_query_rides_out_5_s_outages_inside_a_read_and_the_sinks_publish(
    spark: Any, tmp_path: Path, own_s3: S3Server
) -> None:
    bucket = own_s3.create_bucket("outage")
    put_inputs(own_s3, bucket)
    downtimes: list[float] = []

    def outages() -> None:
        # A task reading input file 2 (never answered), then the manifest PUT of batch 4
        # (applied, its answer lost: the retry meets 412 and must find its own bytes).
        own_s3.arm("GET", rf"^/{bucket}/in/f2\.parquet$")
        wait_closed(own_s3)
        downtimes.append(own_s3.outage(OUTAGE_S))
        own_s3.arm("PUT", rf"^/{bucket}/out/_firesteel/manifests/.*/4\.json$", after=True)
        wait_closed(own_s3)
        downtimes.append(own_s3.outage(OUTAGE_S))

    killer = threading.Thread(target=outages, daemon=True)
    killer.start()
    settings = own_s3.settings()
    reader = spark.readStream.format("firesteel.files").option("max.files.per.batch", "1")
    for key, value in settings.items():
        reader = reader.option(key, value)
    query = run_available_now(
        reader.load(f"s3a://{bucket}/in"),
        {
            "path": f"s3a://{bucket}/out",
            "checkpointLocation": str(tmp_path / "ck"),
            "guarantee": "exactly-once",
            **settings,
        },
    )
    killer.join(timeout=120)
    assert not killer.is_alive(), "the outages did not finish"
    assert query.exception() is None
    assert len(downtimes) == 2 and min(downtimes) >= OUTAGE_S, downtimes
    table = ds.dataset(f"{bucket}/out", format="parquet", filesystem=own_s3.filesystem())
    seqs = sorted(table.to_table().column("seq").to_pylist())
    assert seqs == list(range(FILES * ROWS_PER_FILE))  # 0 lost, 0 duplicated
    listed = own_s3.client().list_objects_v2(Bucket=bucket, Prefix="out/")["Contents"]
    data = [o["Key"] for o in listed if "/_firesteel/" not in o["Key"]]
    assert len(data) == FILES, data


def test_a_create_whose_put_landed_but_whose_answer_was_lost_is_ours_and_waits_are_logged(
    own_s3: S3Server, caplog: pytest.LogCaptureFixture
) -> None:
    """The conditional PUT is applied, the server dies before answering; the retry after
    the restart meets "already exists", reads the object back and finds its own bytes."""
    bucket = own_s3.create_bucket("outage-create")
    config = StorageConfig.of(own_s3.settings())
    own_s3.arm("PUT", rf"^/{bucket}/records/r\.json$", after=True)
    outage = threading.Thread(target=lambda: (wait_closed(own_s3), own_s3.outage(2.0)))
    outage.start()
    try:
        with caplog.at_level(logging.WARNING, logger="firesteel.core.store_retry"):
            created = create_record(f"s3a://{bucket}/records/r.json", "test", 1, {"n": 1}, config)
            again = create_record(f"s3a://{bucket}/records/r.json", "test", 1, {"n": 2}, config)
    finally:
        outage.join()  # before the fixture stops the server: never restarted behind its back
    assert (created, again) == (True, False)
    assert read_record(f"s3a://{bucket}/records/r.json", "test", (1,), config) == {"n": 1}
    waits = [r.getMessage() for r in caplog.records if "trying again" in r.getMessage()]
    assert waits, "no wait was logged"
    for wait in waits:
        assert f"create s3://{bucket}/records/r.json" in wait, wait
        assert own_s3.endpoint in wait and "fs.s3a.retry.timeout.ms=60000" in wait, wait


def s3_source(server: S3Server, bucket: str, extra: dict[str, str]) -> FilesSource:
    options = {"path": f"s3a://{bucket}/in", **server.settings(), **extra}
    opts = parse_options(FilesSourceOptions, options, passthrough_prefixes=("fs.",))
    return FilesSource(opts, storage=StorageConfig.of(opts.passthrough))


def test_past_the_window_the_source_and_the_sink_fail_naming_endpoint_and_setting(
    own_s3: S3Server,
) -> None:
    from test_files_on_s3 import s3_sink, vote

    bucket = own_s3.create_bucket("outage-long")
    put_inputs(own_s3, bucket)
    window = {"fs.s3a.retry.timeout.ms": "3000"}
    source = s3_source(own_s3, bucket, window)
    start = source.initial_offset()
    end = source.latest_offset(start, ReadLimit())
    (partition, *_) = source.partitions(start, end)
    sink = s3_sink(own_s3, bucket, "out", storage=StorageConfig.of({**own_s3.settings(), **window}))
    votes = [vote(sink, 0, 0, rows(0, 10))]
    own_s3.stop()

    started = time.monotonic()
    with pytest.raises(StorageError) as read_failure:
        list(source.read(partition))
    took = time.monotonic() - started
    assert 3.0 <= took < 30.0, took
    message = str(read_failure.value)
    assert f"s3://{bucket}/in/f0.parquet" in message, message
    assert own_s3.endpoint in message and "fs.s3a.retry.timeout.ms=3000" in message, message

    with pytest.raises(StorageError) as listing_failure:
        source.latest_offset(end, ReadLimit())
    message = str(listing_failure.value)
    assert f"s3://{bucket}/in" in message, message
    assert own_s3.endpoint in message and "fs.s3a.retry.timeout.ms=3000" in message, message

    with pytest.raises(StorageError) as commit_failure:
        sink.commit_batch(0, votes)
    message = str(commit_failure.value)
    assert f"s3://{bucket}/out/_firesteel/manifests/" in message, message
    assert own_s3.endpoint in message and "fs.s3a.retry.timeout.ms=3000" in message, message
    assert "fs.s3a.endpoint" in message, message


@pytest.mark.parametrize("committed", [False, True])
def test_a_query_that_committed_before_waits_for_its_store_in_a_new_process(
    tmp_path: Path, committed: bool
) -> None:
    """Spark builds a query's writer in a new Python process for every batch, where a
    bucket's check is the process's first: a new query fails at once naming the endpoint
    setting, one whose checkpoint holds a committed batch waits out the window like any
    call and names the window's setting."""
    from firesteel.core.spark.writer import SparkStreamWriter
    from firesteel.files.sink import FilesSink
    from firesteel.files.sink.writer import WriterConfig
    from firesteel.testing.ports import free_port

    endpoint = f"http://127.0.0.1:{free_port()}"  # nobody listens: the store is away
    checkpoint = tmp_path / "ck"
    (checkpoint / "commits").mkdir(parents=True)
    (checkpoint / "offsets").mkdir()
    entry = {"firesteel": {"source": "firesteel.files", "replay": "resettable"}, "offset": {}}
    (checkpoint / "offsets" / "1").write_text(f"v1\n{{}}\n{json.dumps(entry)}\n")
    if committed:
        (checkpoint / "commits" / "0").write_text("v1\n{}\n")
    settings = {
        "fs.s3a.endpoint": endpoint,
        "fs.s3a.access.key": "k",
        "fs.s3a.secret.key": "s",
        "fs.s3a.retry.timeout.ms": "2000",
    }
    config = WriterConfig(
        out="s3a://away/out",
        sink_id="s1",
        format="parquet",
        bucket_columns=(),
        roll_size_bytes=1 << 30,
        compression=None,
        storage=StorageConfig.of(settings),
    )
    started = time.monotonic()
    with pytest.raises(StorageError) as failure:
        SparkStreamWriter(FilesSink(config), {"checkpointlocation": str(checkpoint)}, None)
    took = time.monotonic() - started
    message = str(failure.value)
    assert endpoint in message, message
    if committed:
        assert took >= 2.0 and "fs.s3a.retry.timeout.ms=2000" in message, (took, message)
    else:
        assert "retry.timeout.ms" not in message and "fs.s3a.endpoint" in message, message
