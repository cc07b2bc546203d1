"""Cassandra sinks and lookups beside raw cassandra-driver ``execute_concurrent_with_args``.

Every side runs in this one process against the same CQL test server
(:mod:`firesteel.testing.cassandra`, its own process on 127.0.0.1), on the
same rows (bigint key, text, double) in fresh tables of one keyspace:

- upsert sink: ``CassandraUpsertSink.write`` for one task (prepare, the Arrow
  -> row conversion, UNSET handling, bounded concurrency ``max.in.flight``)
  beside the same prepared INSERT through ``execute_concurrent_with_args``
  with the same concurrency, over rows already in Python tuples;
- write-ahead-log sink: one task's segment written to a local checkpoint,
  then the driver's commit (read, verify, send, record) beside the upsert
  sink writing the same rows: what the WAL's extra durability costs;
- the write-ahead-log commit of :data:`SEGMENTS` segments with
  ``send.connect``: the sends run as a Spark job on the benchmark session's
  ``local[2]`` executors, through its own Spark Connect server
  (:mod:`firesteel.sinks.fanout`), beside the same commit sending one segment
  after another on the driver; only the commit is timed (the segments are
  written first, as the tasks would);
- ``batch=partition``: the upsert sink on time-series rows
  (:data:`PER_PARTITION` readings per sensor, interleaved) sending each
  sensor's rows in UNLOGGED batches, beside the same sink with one INSERT per
  row;
- lookups: ``Lookups.enrich`` of one record batch (keys out of Arrow, the
  looked-up columns back into Arrow) beside the same prepared SELECTs through
  ``execute_concurrent_with_args``.

The figure measures the client path, NOT Cassandra: the test server is an
in-memory Python server, far slower than a real node, and it bounds both
sides alike. Spark's own overhead (scheduling, Arrow transfer to the Python
worker) is not in either figure. Each run's table is counted afterwards.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from benchmarks import spark
from benchmarks.framework import Workload

FULL_ROWS = 20_000
QUICK_ROWS = 1_000
IN_FLIGHT = 10
PER_PARTITION = 20
"""Readings per sensor in the ``batch=partition`` workload."""
SEGMENTS = 4
"""Segments of the write-ahead-log commit workload: four tasks' worth."""


@dataclass
class _Server:
    host: str = ""
    port: int = 0
    session: Any = None
    runs: Iterator[int] = field(default_factory=itertools.count)


_STATE = _Server()


@contextmanager
def setup(quick: bool) -> Iterator[None]:
    """One test server (or ``FIRESTEEL_CASSANDRA_HOSTS``) and a keyspace for the group."""
    from firesteel.testing.cassandra import cassandra_cluster, connect

    with cassandra_cluster() as (host, port):
        session: Any = connect(host, port)
        session.execute(
            "CREATE KEYSPACE IF NOT EXISTS bench WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 1}"
        )
        _STATE.host, _STATE.port, _STATE.session = host, port, session
        try:
            yield
        finally:
            session.cluster.shutdown()
            _STATE.session = None


def _table() -> str:
    name = f"t{next(_STATE.runs)}"
    _STATE.session.execute(
        f"CREATE TABLE bench.{name} (k bigint PRIMARY KEY, name text, score double)"
    )
    return name


def _check(table: str, rows: int, side: str) -> None:
    count = _STATE.session.execute(f"SELECT count(*) FROM bench.{table}").one().count
    if count != rows:
        msg = f"{side}: bench.{table} holds {count} rows, expected {rows}"
        raise AssertionError(msg)


def _data(rows: int) -> pa.RecordBatch:
    keys = list(range(rows))
    return pa.record_batch(
        {"k": keys, "name": [f"name-{k}" for k in keys], "score": [k * 0.5 for k in keys]}
    )


def firesteel_upsert(rows: int) -> Callable[[], float]:
    """rows/s of one task of the upsert sink."""
    from firesteel.cassandra.options import CassandraSinkOptions
    from firesteel.cassandra.sink import CassandraUpsertSink
    from firesteel.core.context import TaskScope

    data = _data(rows)

    def run() -> float:
        table = _table()
        options = CassandraSinkOptions(
            contact_points=_STATE.host,
            port=_STATE.port,
            keyspace="bench",
            table=table,
            max_in_flight=IN_FLIGHT,
        )
        sink = CassandraUpsertSink(options, data.schema, "bench")
        # The driver half prepares (and a worker connects) once per query, not per task.
        sink.prepare()
        start = time.perf_counter()
        sink.write(TaskScope("bench", 0, 0, 0), iter([data]))
        elapsed = time.perf_counter() - start
        _check(table, rows, "firesteel")
        return rows / elapsed

    return run


def _series(rows: int) -> pa.RecordBatch:
    sensors = rows // PER_PARTITION
    return pa.record_batch(
        {
            "sensor": [f"sensor-{i % sensors}" for i in range(rows)],
            "at": pa.array([i // sensors for i in range(rows)], pa.int64()),
            "score": [i * 0.5 for i in range(rows)],
        }
    )


def firesteel_series(rows: int, batch: str) -> Callable[[], float]:
    """rows/s of one task of the upsert sink on time-series rows, with ``batch``."""
    from firesteel.cassandra.options import CassandraSinkOptions
    from firesteel.cassandra.sink import CassandraUpsertSink
    from firesteel.core.context import TaskScope

    data = _series(rows)

    def run() -> float:
        table = f"s{next(_STATE.runs)}"
        _STATE.session.execute(
            f"CREATE TABLE bench.{table} (sensor text, at bigint, score double, "
            "PRIMARY KEY ((sensor), at))"
        )
        options = CassandraSinkOptions(
            contact_points=_STATE.host,
            port=_STATE.port,
            keyspace="bench",
            table=table,
            max_in_flight=IN_FLIGHT,
            batch=batch,
        )
        sink = CassandraUpsertSink(options, data.schema, "bench")
        sink.prepare()
        start = time.perf_counter()
        sink.write(TaskScope("bench", 0, 0, 0), iter([data]))
        elapsed = time.perf_counter() - start
        _check(table, rows, f"firesteel batch={batch}")
        return rows / elapsed

    return run


def raw_driver(rows: int) -> Callable[[], float]:
    """rows/s of ``execute_concurrent_with_args`` with the same INSERT and concurrency."""
    from cassandra.concurrent import execute_concurrent_with_args

    params = [tuple(r.values()) for r in _data(rows).to_pylist()]

    def run() -> float:
        table = _table()
        start = time.perf_counter()
        insert = _STATE.session.prepare(
            f"INSERT INTO bench.{table} (k, name, score) VALUES (?, ?, ?)"
        )
        execute_concurrent_with_args(_STATE.session, insert, params, concurrency=IN_FLIGHT)
        elapsed = time.perf_counter() - start
        _check(table, rows, "raw driver")
        return rows / elapsed

    return run


def firesteel_wal(rows: int) -> Callable[[], float]:
    """rows/s of one task's segment plus the driver's commit of the write-ahead-log sink."""
    from firesteel.cassandra.options import CassandraSinkOptions
    from firesteel.cassandra.wal import CassandraWalSink
    from firesteel.core.context import TaskScope

    data = _data(rows)

    def run() -> float:
        table = _table()
        options = CassandraSinkOptions(
            contact_points=_STATE.host,
            port=_STATE.port,
            keyspace="bench",
            table=table,
            mode="wal",
            max_in_flight=IN_FLIGHT,
        )
        with tempfile.TemporaryDirectory(prefix="firesteel-bench-wal-") as checkpoint:
            sink = CassandraWalSink(options, data.schema, f"bench-{table}", checkpoint)
            sink.prepare()
            start = time.perf_counter()
            vote = sink.write_partition(TaskScope("bench", 0, 0, 0), iter([data]))
            sink.commit_batch(0, [vote])
            elapsed = time.perf_counter() - start
        _check(table, rows, "firesteel wal")
        return rows / elapsed

    return run


def wal_commit(rows: int, on_executors: bool) -> Callable[[], float]:
    """rows/s of the write-ahead-log commit of :data:`SEGMENTS` segments (see the module docs)."""
    from firesteel.cassandra.options import CassandraSinkOptions
    from firesteel.cassandra.wal import CassandraWalSink
    from firesteel.core.context import TaskScope

    data = _data(rows)
    share = -(-rows // SEGMENTS)

    def run() -> float:
        table = _table()
        options = CassandraSinkOptions(
            contact_points=_STATE.host,
            port=_STATE.port,
            keyspace="bench",
            table=table,
            mode="wal",
            max_in_flight=IN_FLIGHT,
            send_connect=spark.connect_url() if on_executors else None,
        )
        with tempfile.TemporaryDirectory(prefix="firesteel-bench-wal-") as checkpoint:
            sink = CassandraWalSink(options, data.schema, f"bench-{table}", checkpoint)
            sink.prepare()
            votes = [
                sink.write_partition(
                    TaskScope("bench", 0, part, 0), iter([data.slice(part * share, share)])
                )
                for part in range(SEGMENTS)
            ]
            start = time.perf_counter()
            sink.commit_batch(0, votes)
            elapsed = time.perf_counter() - start
        _check(table, rows, "firesteel wal commit")
        return rows / elapsed

    return run


def _lookup_table(rows: int) -> str:
    from cassandra.concurrent import execute_concurrent_with_args

    table = _table()
    insert = _STATE.session.prepare(f"INSERT INTO bench.{table} (k, name, score) VALUES (?, ?, ?)")
    params = [tuple(r.values()) for r in _data(rows).to_pylist()]
    execute_concurrent_with_args(_STATE.session, insert, params, concurrency=IN_FLIGHT)
    return table


def firesteel_lookup(rows: int) -> Callable[[], float]:
    """lookups/s of ``Lookups.enrich`` over one record batch of keys, all found."""
    from firesteel.cassandra.lookups import Lookups, LookupSpec

    keys = pa.record_batch({"k": pa.array(range(rows), pa.int64())})
    out_types = {"name": pa.string(), "score": pa.float64()}

    def run() -> float:
        spec = LookupSpec(
            contact_points=_STATE.host,
            port=_STATE.port,
            keyspace="bench",
            table=_lookup_table(rows),
            on=("k",),
            columns=("name", "score"),
            max_in_flight=IN_FLIGHT,
        )
        start = time.perf_counter()
        out = Lookups(spec, out_types, _STATE.session).enrich(keys)
        elapsed = time.perf_counter() - start
        if out.column("name").null_count:
            msg = f"firesteel lookup: {out.column('name').null_count} keys not found"
            raise AssertionError(msg)
        return rows / elapsed

    return run


def raw_lookup(rows: int) -> Callable[[], float]:
    """lookups/s of the same SELECTs through ``execute_concurrent_with_args``."""
    from cassandra.concurrent import execute_concurrent_with_args

    params = [(k,) for k in range(rows)]

    def run() -> float:
        table = _lookup_table(rows)
        start = time.perf_counter()
        select = _STATE.session.prepare(
            f"SELECT name, score FROM bench.{table} WHERE k = ? LIMIT 1"
        )
        results = execute_concurrent_with_args(
            _STATE.session, select, params, concurrency=IN_FLIGHT
        )
        found = sum(1 for result in results if result.result_or_exc)
        elapsed = time.perf_counter() - start
        if found != rows:
            msg = f"raw lookup: {rows - found} keys not found"
            raise AssertionError(msg)
        return rows / elapsed

    return run


def workloads(quick: bool) -> list[Workload]:
    """The upsert sink and lookups beside the raw driver; the WAL sink and ``batch=partition``
    beside the upsert sink."""
    rows = QUICK_ROWS if quick else FULL_ROWS
    repetitions, warmup = (1, 0) if quick else (3, 1)
    return [
        Workload(
            group="cassandra",
            name=f"upsert sink, one task, {rows // 1000}k rows (client path; CQL test server)",
            unit="rows/s",
            baseline_name=f"raw execute_concurrent_with_args, concurrency {IN_FLIGHT}",
            goal=0.8,
            issue="issue 10",
            firesteel=firesteel_upsert(rows),
            baseline=raw_driver(rows),
            repetitions=repetitions,
            warmup=warmup,
        ),
        Workload(
            group="cassandra",
            name=f"write-ahead-log sink, one task + commit, {rows // 1000}k rows (CQL test server)",
            unit="rows/s",
            baseline_name="upsert sink, one task (same rows, same concurrency)",
            goal=None,
            issue="issue 10",
            firesteel=firesteel_wal(rows),
            baseline=firesteel_upsert(rows),
            repetitions=repetitions,
            warmup=warmup,
        ),
        Workload(
            group="cassandra",
            name=f"write-ahead-log commit of {SEGMENTS} segments, {rows // 1000}k rows, sent on "
            "the executors through Spark Connect (local[2]; CQL test server)",
            unit="rows/s",
            baseline_name="the same commit sending on the driver, one segment after another",
            goal=None,
            issue="issue 10",
            firesteel=wal_commit(rows, on_executors=True),
            baseline=wal_commit(rows, on_executors=False),
            repetitions=repetitions,
            warmup=warmup,
        ),
        Workload(
            group="cassandra",
            name=f"upsert sink batch=partition, {rows // 1000}k rows, {PER_PARTITION} per "
            "partition (CQL test server)",
            unit="rows/s",
            baseline_name="upsert sink batch=none (one INSERT per row, same rows)",
            goal=None,
            issue="issue 10",
            firesteel=firesteel_series(rows, "partition"),
            baseline=firesteel_series(rows, "none"),
            repetitions=repetitions,
            warmup=warmup,
        ),
        Workload(
            group="cassandra",
            name=f"lookups, one task, {rows // 1000}k keys (client path; CQL test server)",
            unit="lookups/s",
            baseline_name=f"raw execute_concurrent_with_args SELECTs, concurrency {IN_FLIGHT}",
            goal=0.8,
            issue="issue 10",
            firesteel=firesteel_lookup(rows),
            baseline=raw_lookup(rows),
            repetitions=repetitions,
            warmup=warmup,
        ),
    ]
