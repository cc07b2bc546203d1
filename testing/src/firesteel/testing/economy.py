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
  ``filesystem`` or ``rocksdb`` backend's snapshots on S3.

Object stores bill per request, so what matters is that the count per batch
stays flat however many batches ran: nothing lists everything ever written.
``tests/test_request_economy.py`` asserts it; ``benchmarks/bench_requests.py``
prints it over 2,000 batches.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pyarrow as pa

from firesteel.core.context import TaskScope
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


def _bucket(server: S3Server, name: str) -> str:
    return server.create_bucket(f"{name}-{uuid.uuid4().hex[:8]}")


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
        votes = []
        for partition in range(PARTITIONS):
            first = (batch_id * PARTITIONS + partition) * ROWS
            records = pa.record_batch({"seq": list(range(first, first + ROWS))})
            scope = TaskScope(QUERY, batch_id, partition, 0)
            votes.append(sink.write_partition(scope, iter([records])))
        sink.commit_batch(batch_id, votes)

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


def _counted(
    server: S3Server, bucket: str, batches: int, batch: Callable[[int], None]
) -> list[Counter[str]]:
    log = RequestLog(server, bucket)
    log.mark()
    counts = []
    for batch_id in range(batches):
        batch(batch_id)
        counts.append(log.take())
    return counts
