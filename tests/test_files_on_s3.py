"""The file connector on an S3 API server process (moto): sink and source round trips,
settings from options and from the session, bad lines quarantined on the store, and bad
locations named within 30 s.

Everything written is read back with boto3 or with pyarrow's own S3 filesystem and
dataset reader (not firesteel's): data keys outside ``_firesteel/`` only, each row once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from files_helpers import rows, run_available_now, write_input

from firesteel.core import register
from firesteel.core.context import TaskScope
from firesteel.core.errors import StorageError
from firesteel.core.options import parse_options
from firesteel.core.storage import StorageConfig
from firesteel.files.sink import FilesSink, WriterConfig
from firesteel.files.sink.manifest import FileCommittable, Manifest, write_manifest
from firesteel.files.source import FilesSource
from firesteel.files.source.options import FilesSourceOptions
from firesteel.testing.ports import free_port
from firesteel.testing.s3 import ACCESS_KEY, SECRET_KEY, S3Server

FAIL_WITHIN_S = 30.0


def data_keys(server: S3Server, bucket: str, prefix: str) -> list[str]:
    """Every key under ``prefix`` that a plain reader sees (none under ``_firesteel/``)."""
    pages = server.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    keys = [item["Key"] for page in pages for item in page.get("Contents", [])]
    return sorted(k for k in keys if "/_firesteel/" not in k)


def plain_seqs(server: S3Server, bucket: str, prefix: str) -> list[int]:
    """The ``seq`` column as pyarrow's dataset reader sees the output prefix, sorted."""
    table = ds.dataset(f"{bucket}/{prefix}", format="parquet", filesystem=server.filesystem())
    return sorted(table.to_table().column("seq").to_pylist())


def s3_sink(server: S3Server, bucket: str, prefix: str, **overrides: Any) -> FilesSink:
    config: dict[str, Any] = {
        "out": f"s3a://{bucket}/{prefix}",
        "sink_id": "s1",
        "format": "parquet",
        "bucket_columns": (),
        "roll_size_bytes": 1 << 30,
        "compression": None,
        "storage": StorageConfig.of(server.settings()),
    }
    config.update(overrides)
    sink = FilesSink(WriterConfig(**config))
    sink.prepare()
    return sink


def vote(sink: FilesSink, batch: int, partition: int, table: pa.Table, attempt: int = 0) -> Any:
    scope = TaskScope("q", batch, partition, attempt)
    return sink.write_partition(scope, iter(table.to_batches(max_chunksize=7)))


def test_sink_commits_on_s3_without_rename_and_a_recommit_keeps_the_first(
    s3_server: S3Server,
) -> None:
    bucket = s3_server.create_bucket("files-sink-commit")
    sink = s3_sink(s3_server, bucket, "out", bucket_columns=("key",))
    first = [vote(sink, 0, 0, rows(0, 30)), vote(sink, 0, 1, rows(30, 30))]
    # A vote of batch 0 that never commits: invisible to a plain reader.
    vote(sink, 1, 0, rows(500, 10))
    sink.commit_batch(0, first)
    assert plain_seqs(s3_server, bucket, "out") == list(range(60))
    keys = data_keys(s3_server, bucket, "out/")
    assert keys and all(k.split("/")[1].startswith("key=k") for k in keys), keys

    # The batch's commit again (a crash before Spark's commits/0), then a re-run of it.
    sink.commit_batch(0, first)
    restarted = s3_sink(s3_server, bucket, "out", bucket_columns=("key",))
    restarted.commit_batch(0, [vote(restarted, 0, 0, rows(0, 60))])
    assert data_keys(s3_server, bucket, "out/") == keys
    assert plain_seqs(s3_server, bucket, "out") == list(range(60))
    # Batch 1 was voted by a crashed run and never committed: its re-run commits it once.
    restarted.commit_batch(1, [vote(restarted, 1, 0, rows(60, 10))])
    assert plain_seqs(s3_server, bucket, "out") == list(range(70))
    pending = s3_server.client().list_objects_v2(Bucket=bucket, Prefix="out/_firesteel/pending/")
    assert [o["Key"] for o in pending.get("Contents", []) if not o["Key"].endswith("/")] == []


def test_recovery_rolls_a_half_published_batch_forward_on_s3(s3_server: S3Server) -> None:
    """The driver died between the manifest PUT and the copies: the restart publishes it."""
    bucket = s3_server.create_bucket("files-sink-recover")
    sink = s3_sink(s3_server, bucket, "out")
    votes = [vote(sink, 0, p, rows(p * 10, 10)) for p in (0, 1)]
    handles = [v.committable(FileCommittable) for v in votes]
    files = tuple(f for h in handles for f in h.files)
    assert write_manifest(sink.out, Manifest("s1", 0, files))
    # One of the two copies happened before the crash (copy done, delete not).
    s3_server.client().copy_object(
        Bucket=bucket,
        Key=f"out/{files[0].path}",
        CopySource={"Bucket": bucket, "Key": f"out/{files[0].pending}"},
    )
    s3_sink(s3_server, bucket, "out")
    assert plain_seqs(s3_server, bucket, "out") == list(range(20))
    assert len(data_keys(s3_server, bucket, "out/")) == 2


def test_files_to_s3_with_fs_options(spark: Any, tmp_path: Path, s3_server: S3Server) -> None:
    bucket = s3_server.create_bucket("files-sink-options")
    for i in range(3):
        write_input(tmp_path / "in", f"f{i}.parquet", rows(i * 100, 100), "parquet")
    reader = spark.readStream.format("firesteel.files").option("max.files.per.batch", "1")
    query = run_available_now(
        reader.load(str(tmp_path / "in")),
        {
            "path": f"s3a://{bucket}/out",
            "checkpointLocation": str(tmp_path / "ck"),
            "guarantee": "exactly-once",
            **s3_server.settings(),
        },
    )
    assert query.exception() is None
    assert plain_seqs(s3_server, bucket, "out") == list(range(300))
    assert len(data_keys(s3_server, bucket, "out/")) == 3


def test_files_to_s3_with_the_sessions_hadoop_settings(
    spark: Any, tmp_path: Path, s3_server: S3Server
) -> None:
    bucket = s3_server.create_bucket("files-sink-session")
    write_input(tmp_path / "in", "f0.parquet", rows(0, 50), "parquet")
    settings = {f"spark.hadoop.{k}": v for k, v in s3_server.settings().items()}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        register(spark)
        query = run_available_now(
            spark.readStream.format("firesteel.files").load(str(tmp_path / "in")),
            {"path": f"s3a://{bucket}/out", "checkpointLocation": str(tmp_path / "ck")},
        )
    finally:
        for key in settings:
            spark.conf.unset(key)
        register(spark)
    assert query.exception() is None
    assert plain_seqs(s3_server, bucket, "out") == list(range(50))


def test_a_missing_bucket_is_named_within_30_seconds_and_nothing_is_written(
    s3_server: S3Server,
) -> None:
    started = time.monotonic()
    with pytest.raises(StorageError, match=r"'s3a://no-such-files-bucket/out'.*fs\.s3a\.endpoint"):
        s3_sink(s3_server, "no-such-files-bucket", "out")
    assert time.monotonic() - started < FAIL_WITHIN_S
    names = [b["Name"] for b in s3_server.client().list_buckets()["Buckets"]]
    assert "no-such-files-bucket" not in names


def test_an_unreachable_endpoint_is_named_within_30_seconds(tmp_path: Path) -> None:
    settings = {
        "fs.s3a.endpoint": f"http://127.0.0.1:{free_port()}",
        "fs.s3a.access.key": ACCESS_KEY,
        "fs.s3a.secret.key": SECRET_KEY,
        "fs.s3a.attempts.maximum": "1",
    }
    started = time.monotonic()
    with pytest.raises(
        StorageError, match=r"'s3a://b/out'.*cannot reach.*fs\.s3a\.endpoint"
    ) as err:
        FilesSink(
            WriterConfig(
                out="s3a://b/out",
                sink_id="s1",
                format="parquet",
                bucket_columns=(),
                roll_size_bytes=1 << 20,
                compression=None,
                storage=StorageConfig.of(settings),
            )
        ).prepare()
    assert time.monotonic() - started < FAIL_WITHIN_S
    assert SECRET_KEY not in str(err.value)


def test_a_misspelled_setting_is_refused_by_name(spark: Any, tmp_path: Path) -> None:
    write_input(tmp_path / "in", "f0.parquet", rows(0, 5), "parquet")
    query = run_available_now(
        spark.readStream.format("firesteel.files").load(str(tmp_path / "in")),
        {"path": "s3a://b/out", "checkpointLocation": str(tmp_path / "ck"), "fs3a.endpoint": "x"},
    )
    assert "unknown option 'fs3a.endpoint'" in str(query.exception())


def test_parquet_read_back_by_pyarrow_alone(s3_server: S3Server) -> None:
    """A committed file is a plain Parquet object: pyarrow reads it by key."""
    bucket = s3_server.create_bucket("files-sink-plain")
    sink = s3_sink(s3_server, bucket, "out")
    sink.commit_batch(0, [vote(sink, 0, 0, rows(0, 12))])
    (key,) = data_keys(s3_server, bucket, "out/")
    table = pq.read_table(f"{bucket}/{key}", filesystem=s3_server.filesystem())
    assert table.column("seq").to_pylist() == list(range(12))


def put_parquet(server: S3Server, bucket: str, key: str, table: pa.Table) -> None:
    """Upload ``table`` as a Parquet object with boto3 (how another system fills a prefix)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    server.client().put_object(Bucket=bucket, Key=key, Body=sink.getvalue().to_pybytes())


def keys(server: S3Server, bucket: str, prefix: str) -> list[str]:
    pages = server.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def test_source_plans_a_logged_batch_the_same_after_new_files_and_a_restart(
    s3_server: S3Server,
) -> None:
    bucket = s3_server.create_bucket("files-source-plan")
    for i in range(3):
        put_parquet(s3_server, bucket, f"in/f{i}.parquet", rows(i * 10, 10))
    put_parquet(s3_server, bucket, "in/_staging/f9.parquet", rows(900, 10))
    opts = parse_options(
        FilesSourceOptions,
        {"path": f"s3a://{bucket}/in", "max.files.per.batch": "2", **s3_server.settings()},
        passthrough_prefixes=("fs.",),
    )
    storage = StorageConfig.of(opts.passthrough)
    source = FilesSource(opts, storage=storage)
    start = source.initial_offset()
    end = source.latest_offset(start, source.default_limit())
    plan = [[e.path for e in p.entries] for p in source.partitions(start, end)]
    assert plan == [["f0.parquet", "f1.parquet"]]
    put_parquet(s3_server, bucket, "in/f3.parquet", rows(30, 10))
    restarted = FilesSource(opts, storage=storage)
    assert [[e.path for e in p.entries] for p in restarted.partitions(start, end)] == plan
    read = pa.Table.from_batches(
        [b for p in restarted.partitions(start, end) for b in restarted.read(p)]
    )
    assert sorted(read.column("seq").to_pylist()) == list(range(20))
    # The log lives under the prefix's hidden _firesteel/, so it is never listed as input.
    assert any(k.startswith("in/_firesteel/source-") for k in keys(s3_server, bucket, "in/"))


def test_s3_prefix_to_s3_output_archives_only_committed_files(
    spark: Any, tmp_path: Path, s3_server: S3Server
) -> None:
    bucket = s3_server.create_bucket("files-source-archive")
    for i in range(4):
        put_parquet(s3_server, bucket, f"in/f{i}.parquet", rows(i * 25, 25))
    reader = spark.readStream.format("firesteel.files").options(
        **{
            "max.files.per.batch": "2",
            "cleanup": "archive",
            "archive.path": f"s3a://{bucket}/archive",
            **s3_server.settings(),
        }
    )
    query = run_available_now(
        reader.load(f"s3a://{bucket}/in"),
        {
            "path": f"s3a://{bucket}/out",
            "checkpointLocation": str(tmp_path / "ck"),
            "guarantee": "exactly-once",
            **s3_server.settings(),
        },
    )
    assert query.exception() is None
    assert plain_seqs(s3_server, bucket, "out") == list(range(100))
    # Spark commits a batch's source offsets when it plans the next batch: the first
    # batch's files are archived, the last batch's wait for the next run.
    assert keys(s3_server, bucket, "archive/") == ["archive/f0.parquet", "archive/f1.parquet"]
    # pyarrow keeps a deleted file's folder as a zero-byte "in/" marker: not data.
    left = [k for k in keys(s3_server, bucket, "in/") if "/_firesteel/" not in k and k != "in/"]
    assert left == ["in/f2.parquet", "in/f3.parquet"]


def test_source_on_a_missing_bucket_is_named_within_30_seconds(s3_server: S3Server) -> None:
    opts = parse_options(
        FilesSourceOptions,
        {"path": "s3a://no-such-input-bucket/in", **s3_server.settings()},
        passthrough_prefixes=("fs.",),
    )
    started = time.monotonic()
    with pytest.raises(StorageError, match=r"'s3a://no-such-input-bucket/in'.*does not exist"):
        FilesSource(opts, storage=StorageConfig.of(opts.passthrough))
    assert time.monotonic() - started < FAIL_WITHIN_S


UNREADABLE = b"PAR1 definitely not parquet"


def _quarantining(server: S3Server, bucket: str, folder: str, fmt: str) -> FilesSource:
    opts = parse_options(
        FilesSourceOptions,
        {
            "path": f"s3a://{bucket}/{folder}",
            "format": fmt,
            "errors": "quarantine",
            "quarantine.path": f"s3a://{bucket}/quarantine",
            **server.settings(),
        },
        passthrough_prefixes=("fs.",),
    )
    return FilesSource(opts, pa.schema([("seq", pa.int64())]), StorageConfig.of(opts.passthrough))


def _read_twice(source: FilesSource) -> list[list[int]]:
    """The batch read, then read again as a replay after a crash would."""
    start = source.initial_offset()
    end = source.latest_offset(start, source.default_limit())
    return [
        pa.Table.from_batches(
            [b for p in source.partitions(start, end) for b in source.read(p)],
            schema=source.schema(),
        )
        .column("seq")
        .to_pylist()
        for _ in range(2)
    ]


def test_bad_lines_and_an_unreadable_file_are_quarantined_on_s3(s3_server: S3Server) -> None:
    bucket = s3_server.create_bucket("files-source-quarantine")
    client = s3_server.client()

    def _lines(key: str) -> list[str]:
        return str(client.get_object(Bucket=bucket, Key=key)["Body"].read().decode()).splitlines()

    client.put_object(Bucket=bucket, Key="lines/a.json", Body=b'{"seq": 1}\nnot json\n{"seq": 3}\n')
    client.put_object(Bucket=bucket, Key="files/b.parquet", Body=UNREADABLE)
    assert _read_twice(_quarantining(s3_server, bucket, "lines", "json")) == [[1, 3], [1, 3]]
    assert _read_twice(_quarantining(s3_server, bucket, "files", "parquet")) == [[], []]
    # Both sources quarantine into one folder: each keeps its own files, each replay
    # replaced its own.
    kept = keys(s3_server, bucket, "quarantine/")
    records = sorted(
        (json.loads(line) for key in kept if key.endswith(".jsonl") for line in _lines(key)),
        key=lambda record: str(record["location"]),
    )
    assert [(r["location"].rsplit("/", 2)[-2:], r["position"]) for r in records] == [
        (["files", "b.parquet"], None),
        (["lines", "a.json"], 2),
    ]
    assert records[1]["record"] == "not json"
    (copy,) = [k for k in kept if k.endswith("b.parquet")]
    assert client.get_object(Bucket=bucket, Key=copy)["Body"].read() == UNREADABLE
