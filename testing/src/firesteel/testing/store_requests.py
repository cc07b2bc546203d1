"""Request economy on an object store: the S3 requests one micro-batch costs, counted at the server.

Each workload drives a firesteel component exactly as Spark drives it, one
micro-batch after another, against an :class:`~firesteel.testing.s3.S3Server`,
and returns the requests every batch cost, by kind (LIST, GET, HEAD, PUT,
DELETE, POST), read from the server's own request log
(:class:`~firesteel.testing.s3.RequestLog`), not from firesteel:

* :func:`wal_batches`: the write-ahead-log sink with its segments, plans and
  commit markers on S3: each task writes its segment, then the driver's commit
  plans, sends, records and cleans up;
* :func:`state_batches`: a keyed-state snapshot per task and batch, with the
  ``filesystem`` or ``rocksdb`` backend's snapshots on S3;
* :func:`files_sink_batches`: the two-phase-commit file sink writing to an
  ``s3a://`` prefix, built again and prepared for every batch as Spark builds it
  (bucket check, write probe, owner record, recovery), two tasks, the commit;
* :func:`files_source_batches`: the file source reading an ``s3a://`` prefix
  where new files arrive before every batch (uploaded with boto3, not counted):
  listing, the discovered-file log, planning, reading, and ``cleanup`` after the
  commit. With ``cleanup=none`` every file stays in the prefix, so its listing
  costs one more LIST request per 1,000 files read (pyarrow lists a whole
  prefix; nothing but the key order could tell a new file from an old one,
  and arrival order is not key order in general); ``archive`` and ``delete``
  keep the prefix to the files not yet read.

Object stores bill per request, so what matters is that the count per batch
stays flat however many batches ran: nothing lists everything ever written.
``tests/test_request_economy.py`` asserts it; ``benchmarks/requests.py``
prints it over 2,000 batches.
"""

from __future__ import annotations

import io
import json
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.types import LongType, StructField, StructType

from firesteel.core.context import TaskScope
from firesteel.core.sink import Sink, Vote
from firesteel.files.connector import FilesDataSource
from firesteel.sinks.committers import FileCheckpointCommitter
from firesteel.state.api import ValueState
from firesteel.state.backend import KeyedTask, OperatorSpec, StateBackend, StateDeclarations
from firesteel.state.descriptors import ValueStateDescriptor
from firesteel.state.keygroups import KeyGroupRange, operator_index
from firesteel.testing.s3 import RequestLog, S3Server
from firesteel.testing.scripts.wal_target import JsonLinesWalSink

PARTITIONS = 2
ROWS = 10
"""Rows per task and batch: the workloads measure requests, not bytes."""
MAX_PARALLELISM = 16
KEYS = 8
COUNT = ValueStateDescriptor("count", int)
QUERY = "economy-query"
SEQ = StructType([StructField("seq", LongType())])
"""The rows of the file sink and source workloads: one sequence number each."""


def _bucket(server: S3Server, name: str) -> str:
    return server.create_bucket(f"{name}-{uuid.uuid4().hex[:8]}")


def _rows(batch_id: int, partition: int) -> pa.RecordBatch:
    """One task's rows: :data:`ROWS` sequence numbers, distinct across tasks and batches."""
    first = (batch_id * PARTITIONS + partition) * ROWS
    return pa.record_batch({"seq": pa.array(range(first, first + ROWS), pa.int64())})


def _write_tasks(sink: Sink, batch_id: int) -> list[Vote]:
    """The votes of batch ``batch_id``'s :data:`PARTITIONS` write tasks, run one after another."""
    return [
        sink.write_partition(
            TaskScope(QUERY, batch_id, partition, 0), iter([_rows(batch_id, partition)])
        )
        for partition in range(PARTITIONS)
    ]


def wal_batches(server: S3Server, workdir: Path, batches: int) -> list[Counter[str]]:
    """Requests per batch of a write-ahead-log sink whose log and commit markers are on S3."""
    bucket = _bucket(server, "economy-wal")
    settings = server.settings()
    sink = JsonLinesWalSink(
        "economy",
        f"s3a://{bucket}/chk/firesteel/wal",
        FileCheckpointCommitter(f"s3a://{bucket}/chk/firesteel/wal-commits", settings),
        str(workdir / "target.jsonl"),
        storage_options=settings,
    )
    sink.prepare()

    def batch(batch_id: int) -> None:
        sink.commit_batch(batch_id, _write_tasks(sink, batch_id))

    return _counted(server, bucket, batches, batch)


def state_batches(
    server: S3Server, kind: str, workdir: Path, batches: int, **options: Any
) -> list[Counter[str]]:
    """Requests per batch of keyed-state snapshots on S3: every task updates its keys and
    snapshots, as the stateful operator does; ``kind`` is ``filesystem`` or ``rocksdb``."""
    from firesteel.backends.inspect import backend_class

    bucket = _bucket(server, f"economy-{kind}")
    extra = {"local_dir": str(workdir / "rocksdb")} if kind == "rocksdb" else {}
    backend: StateBackend = backend_class(kind)(
        f"s3a://{bucket}/state", storage_options=server.settings(), **extra, **options
    )
    backend.validate()
    spec = OperatorSpec("counts", ("key",), MAX_PARALLELISM, PARTITIONS)

    def batch(batch_id: int) -> None:
        for partition in range(PARTITIONS):
            owned = KeyGroupRange.for_partition(partition, PARTITIONS, MAX_PARALLELISM)
            task = KeyedTask(TaskScope(QUERY, batch_id, partition, 0), owned)
            store = backend.open_store(spec, task, StateDeclarations([COUNT]), 1_000 + batch_id)
            for key in range(KEYS):
                group = key % MAX_PARALLELISM
                if operator_index(group, PARTITIONS, MAX_PARALLELISM) == partition:
                    store.set_current_key((key,), group)
                    count = cast(ValueState, store.state(COUNT))
                    count.update((count.value() or 0) + 1)
            store.snapshot().wait()

    return _counted(server, bucket, batches, batch)


def files_sink_batches(server: S3Server, workdir: Path, batches: int) -> list[Counter[str]]:
    """Requests per batch of the two-phase-commit file sink writing Parquet to S3."""
    bucket = _bucket(server, "economy-files-sink")
    checkpoint = workdir / "checkpoint"
    checkpoint.mkdir()
    # Spark's query metadata: the sink's owner record names this query, as in a real run.
    (checkpoint / "metadata").write_text(json.dumps({"id": QUERY}) + "\n")
    options = CaseInsensitiveDict(
        {
            "path": f"s3a://{bucket}/out",
            "format": "parquet",
            "checkpointLocation": str(checkpoint),
            **server.settings(),
        }
    )

    def batch(batch_id: int) -> None:
        # Spark builds the writer again for every batch, on the driver (see
        # firesteel.core.spark.writer.SparkStreamWriter), so each batch pays its prepare().
        sink, _required = FilesDataSource(options).create_sink(SEQ)
        sink.prepare()
        sink.commit_batch(batch_id, _write_tasks(sink, batch_id))

    return _counted(server, bucket, batches, batch)


def files_source_batches(
    server: S3Server, workdir: Path, batches: int, cleanup: str = "archive"
) -> list[Counter[str]]:
    """Requests per batch of the file source reading S3, :data:`PARTITIONS` new Parquet files
    arriving before each batch; ``cleanup`` is the source's option (``archive``: to another
    prefix of the bucket)."""
    bucket = _bucket(server, f"economy-files-source-{cleanup}")
    options: dict[str, str] = {
        "path": f"s3a://{bucket}/in",
        "format": "parquet",
        "cleanup": cleanup,
        **server.settings(),
    }
    if cleanup == "archive":
        options["archive.path"] = f"s3a://{bucket}/archive"
    # Spark builds the reader once per query and keeps it for every batch.
    source = FilesDataSource(CaseInsensitiveDict(options)).create_source(SEQ)
    client = server.client()
    start = source.initial_offset()
    limit = source.default_limit()

    def arrive(batch_id: int) -> None:
        for partition in range(PARTITIONS):
            body = io.BytesIO()
            pq.write_table(pa.Table.from_batches([_rows(batch_id, partition)]), body)
            key = f"in/part-{batch_id:06d}-{partition}.parquet"
            client.put_object(Bucket=bucket, Key=key, Body=body.getvalue())

    def batch(batch_id: int) -> None:
        nonlocal start
        end = source.latest_offset(start, limit)
        source.report_latest_offset()
        rows = sum(
            part.num_rows
            for partition in source.partitions(start, end)
            for part in source.read(partition)
        )
        if rows != PARTITIONS * ROWS:
            msg = f"batch {batch_id} of the file source read {rows} rows, not {PARTITIONS * ROWS}"
            raise AssertionError(msg)
        source.commit(end)
        start = end

    return _counted(server, bucket, batches, batch, arrive)


def _counted(
    server: S3Server,
    bucket: str,
    batches: int,
    batch: Callable[[int], None],
    arrive: Callable[[int], None] | None = None,
) -> list[Counter[str]]:
    """Each batch's requests to ``bucket``; what ``arrive`` does before a batch (new input
    written by someone else) is not counted."""
    log = RequestLog(server, bucket)
    log.mark()
    counts = []
    for batch_id in range(batches):
        if arrive is not None:
            arrive(batch_id)
            log.take()
        batch(batch_id)
        counts.append(log.take())
    return counts
