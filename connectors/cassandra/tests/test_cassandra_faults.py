"""The sinks under faults injected into the CQL test server, and the retry policy behind them.

Faults are armed over the protocol (:func:`firesteel.testing.cassandra.inject`),
so they reach Spark's workers too. The tables are read back through
cassandra-driver, never through the sinks.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cassandra import ConsistencyLevel, WriteTimeout
from cassandra.cluster import EXEC_PROFILE_DEFAULT, NoHostAvailable
from cassandra.policies import RetryPolicy, WriteType
from cassandra.protocol import OverloadedErrorMessage
from cassandra.query import SimpleStatement
from pyspark.errors import StreamingQueryException

from firesteel.cassandra.client import (
    FIRST_BACKOFF,
    MAX_ATTEMPTS,
    ClusterOptions,
    IdempotentRetryPolicy,
    session_for,
)
from firesteel.cassandra.errors import CassandraLookupError
from firesteel.cassandra.lookups import Lookups, LookupSpec
from firesteel.cassandra.options import CassandraSinkOptions
from firesteel.cassandra.sink import CassandraUpsertSink
from firesteel.cassandra.statement import RowStatement
from firesteel.cassandra.wal import CassandraWalSink
from firesteel.core.context import TaskScope
from firesteel.testing.cassandra import HOSTS_ENV, clear, inject

ROWS = 200


@pytest.fixture
def faults(cluster_address: tuple[str, int]) -> Iterator[tuple[str, int]]:
    """The test server's address; every fault rule is cleared afterwards."""
    if os.environ.get(HOSTS_ENV):
        pytest.skip("fault injection needs the test server, not a real cluster")
    yield cluster_address
    clear(*cluster_address)


def _options(
    address: tuple[str, int], keyspace: str, table: str, **extra: Any
) -> CassandraSinkOptions:
    host, port = address
    return CassandraSinkOptions(
        contact_points=host, port=port, keyspace=keyspace, table=table, **extra
    )


def _data(rows: int = ROWS) -> pa.RecordBatch:
    keys = list(range(rows))
    return pa.record_batch({"k": keys, "name": [f"name-{k}" for k in keys]})


def _stored(session: Any, table: str) -> dict[int, str]:
    return {r.k: r.name for r in session.execute(f"SELECT k, name FROM {table}")}


def _expected(rows: int = ROWS) -> dict[int, str]:
    return {k: f"name-{k}" for k in range(rows)}


def _quoted(table: str) -> str:
    """What a sink's INSERT names (``"ks"."table"``), never the test's own reads."""
    return f'"{table}"'


def _left(session: Any) -> list[tuple[str, int]]:
    """(kind, remaining) of every rule: all remaining 0 means every fault fired."""
    rules = session.execute("SELECT id, kind, remaining FROM firesteel_faults.rules")
    return [(r.kind, r.remaining) for r in sorted(rules, key=lambda r: r.id)]


def _upsert_sink(
    address: tuple[str, int], session: Any, table: str, **extra: Any
) -> CassandraUpsertSink:
    session.execute(f"CREATE TABLE {table} (k bigint PRIMARY KEY, name text)")
    options = _options(address, session.keyspace, table, **extra)
    sink = CassandraUpsertSink(options, _data().schema, "faults")
    sink.prepare()
    return sink


def _wait_reconnected(options: ClusterOptions, timeout: float = 20.0) -> None:
    """Until the session has an open connection to every node again."""
    session = session_for(options)
    deadline = time.monotonic() + timeout
    while True:
        pools = session.get_pool_state()
        hosts = session.cluster.metadata.all_hosts()
        if all(h.is_up and pools.get(h, {}).get("open_count", 0) for h in hosts):
            return
        assert time.monotonic() < deadline, "the driver did not reconnect"
        time.sleep(0.05)


# The policy's decisions.


def test_the_policy_retries_idempotent_statements_within_the_budget() -> None:
    one, many = IdempotentRetryPolicy(3), IdempotentRetryPolicy(3, live_hosts=lambda: 2)
    query = SimpleStatement("INSERT", is_idempotent=True)
    quorum = ConsistencyLevel.QUORUM
    error = OverloadedErrorMessage(0x1001, "overloaded", {})
    for retry_num in (0, 1):
        assert one.on_write_timeout(query, quorum, WriteType.SIMPLE, 2, 1, retry_num) == (
            RetryPolicy.RETRY,
            quorum,
        )
        assert one.on_unavailable(query, quorum, 2, 1, retry_num) == (RetryPolicy.RETRY, quorum)
        assert many.on_unavailable(query, quorum, 2, 1, retry_num) == (
            RetryPolicy.RETRY_NEXT_HOST,
            quorum,
        )
        assert one.on_request_error(query, quorum, error, retry_num)[0] == RetryPolicy.RETRY
        assert many.on_request_error(query, quorum, error, retry_num)[0] == (
            RetryPolicy.RETRY_NEXT_HOST
        )
    assert one.on_write_timeout(query, quorum, WriteType.SIMPLE, 2, 1, 2) == (
        RetryPolicy.RETHROW,
        None,
    )
    assert one.on_request_error(query, quorum, error, 2) == (RetryPolicy.RETHROW, None)


def test_the_policy_leaves_other_statements_to_the_drivers_policy() -> None:
    policy, default = IdempotentRetryPolicy(), RetryPolicy()
    query = SimpleStatement("UPDATE counters SET n = n + 1 WHERE k = 1")
    one = ConsistencyLevel.ONE
    for retry_num in (0, 1):
        args = (query, one, WriteType.SIMPLE, 1, 0, retry_num)
        assert policy.on_write_timeout(*args) == default.on_write_timeout(*args)
        assert policy.on_unavailable(query, one, 1, 0, retry_num) == default.on_unavailable(
            query, one, 1, 0, retry_num
        )


def test_sink_sessions_use_the_policy(cluster_address: tuple[str, int], session: Any) -> None:
    options = _options(cluster_address, session.keyspace, "any")
    profile = session_for(options).get_execution_profile(EXEC_PROFILE_DEFAULT)
    assert isinstance(profile.retry_policy, IdempotentRetryPolicy)
    assert profile.retry_policy.max_attempts == MAX_ATTEMPTS == 5


# The upsert sink, one task driven directly.


@pytest.mark.parametrize("applied", [False, True], ids=["not-applied", "applied"])
def test_upsert_sink_rides_out_write_timeouts_overload_and_unavailable(
    faults: tuple[str, int], session: Any, applied: bool
) -> None:
    table = f"up_ride_{int(applied)}"
    sink = _upsert_sink(faults, session, table)
    inject(*faults, "write_timeout", count=3, skip=40, match=_quoted(table), applied=applied)
    inject(*faults, "overloaded", count=1, skip=80, match=_quoted(table))
    inject(*faults, "unavailable", count=1, skip=120, match=_quoted(table))
    assert sink.write(TaskScope("q", 0, 0, 0), iter([_data()])) == ROWS
    assert _stored(session, table) == _expected()
    assert _left(session) == [("write_timeout", 0), ("overloaded", 0), ("unavailable", 0)]


@pytest.mark.parametrize("applied", [False, True], ids=["not-applied", "applied"])
def test_upsert_sink_retry_budget_is_exactly_max_attempts(
    faults: tuple[str, int], session: Any, applied: bool
) -> None:
    """One request in flight, so consecutive faults hit the attempts of one statement."""
    table = f"up_budget_{int(applied)}"
    sink = _upsert_sink(faults, session, table, max_in_flight=1, retry_timeout_ms=0)
    scope = TaskScope("q", 0, 0, 0)
    inject(
        *faults,
        "write_timeout",
        count=MAX_ATTEMPTS - 1,
        skip=10,
        match=_quoted(table),
        applied=applied,
    )
    assert sink.write(scope, iter([_data()])) == ROWS
    assert _stored(session, table) == _expected()

    session.execute(f"TRUNCATE {table}")
    inject(
        *faults, "write_timeout", count=MAX_ATTEMPTS, skip=10, match=_quoted(table), applied=applied
    )
    start = time.monotonic()
    with pytest.raises(WriteTimeout):
        sink.write(scope, iter([_data()]))
    assert time.monotonic() - start < 10
    # Row 10 spent the attempts; the rows after it were still sent (the batch fails anyway).
    written = set(_stored(session, table))
    assert written == set(range(ROWS)) - (set() if applied else {10})
    clear(*faults)
    assert sink.write(scope, iter([_data()])) == ROWS
    assert _stored(session, table) == _expected()


@pytest.mark.parametrize("applied", [False, True], ids=["not-applied", "applied"])
def test_upsert_sink_fails_fast_on_a_dropped_connection_and_a_rerun_completes(
    faults: tuple[str, int], session: Any, applied: bool
) -> None:
    """The only node is marked down by the drop, so the immediate retries cannot reach it:
    without backoff (retry.timeout.ms=0) the task fails at once (no hang) and its re-run,
    once the driver reconnected, completes."""
    table = f"up_drop_{int(applied)}"
    sink = _upsert_sink(faults, session, table, retry_timeout_ms=0)
    scope = TaskScope("q", 0, 0, 0)
    inject(*faults, "drop", count=1, skip=60, match=_quoted(table), applied=applied)
    start = time.monotonic()
    with pytest.raises(NoHostAvailable):
        sink.write(scope, iter([_data()]))
    assert time.monotonic() - start < 10
    # One connection answers in order: what ran is exactly what came before the drop.
    assert set(_stored(session, table)) == set(range(61 if applied else 60))
    assert _left(session) == [("drop", 0)]
    _wait_reconnected(sink.options)
    assert sink.write(scope, iter([_data()])) == ROWS
    assert _stored(session, table) == _expected()


@pytest.mark.parametrize("applied", [False, True], ids=["not-applied", "applied"])
def test_upsert_sink_backs_off_and_rides_out_a_dropped_connection_and_a_timeout_storm(
    faults: tuple[str, int], session: Any, applied: bool
) -> None:
    """With the default retry.timeout.ms the writes the driver gave up on are re-sent after
    a backoff: the node is back by then, and more timeouts than the driver's attempts in a
    row are outlasted. Nothing is lost, and the task does not fail."""
    table = f"up_backoff_{int(applied)}"
    sink = _upsert_sink(faults, session, table, max_in_flight=1)
    scope = TaskScope("q", 0, 0, 0)
    inject(*faults, "drop", count=1, skip=60, match=_quoted(table), applied=applied)
    assert sink.write(scope, iter([_data()])) == ROWS
    assert _stored(session, table) == _expected()
    assert _left(session) == [("drop", 0)]

    session.execute(f"TRUNCATE {table}")
    clear(*faults)
    storm = 2 * MAX_ATTEMPTS
    inject(*faults, "write_timeout", count=storm, skip=10, match=_quoted(table), applied=applied)
    start = time.monotonic()
    assert sink.write(scope, iter([_data()])) == ROWS
    # Rows 10 and 11 spent all the driver's attempts; the re-send came after a backoff.
    assert time.monotonic() - start >= FIRST_BACKOFF
    assert _stored(session, table) == _expected()
    assert _left(session) == [("write_timeout", 0)]


def test_counter_increments_are_never_resent(faults: tuple[str, int], session: Any) -> None:
    """A timed-out increment may have been applied: neither the driver nor the sink sends
    it again. The task fails; the write-ahead log decides what is re-sent."""
    session.execute("CREATE TABLE hits (k bigint PRIMARY KEY, n counter)")
    options = _options(faults, session.keyspace, "hits", mode="wal", write="increment")
    statement = RowStatement(options, pa.schema([("k", pa.int64()), ("n", pa.int64())]))
    prepared = statement.prepare(session)
    inject(*faults, "write_timeout", count=1, match=_quoted("hits"), applied=True)
    with pytest.raises(WriteTimeout):
        statement.execute(session, prepared, [pa.record_batch({"k": [1], "n": [5]})], "test")
    assert [(r.k, r.n) for r in session.execute("SELECT k, n FROM hits")] == [(1, 5)]


# The write-ahead-log sink: the driver's commit sends the logged segment.


def _wal_sink(
    address: tuple[str, int], session: Any, table: str, checkpoint: Path, **extra: Any
) -> CassandraWalSink:
    session.execute(f"CREATE TABLE {table} (k bigint PRIMARY KEY, name text)")
    options = _options(address, session.keyspace, table, mode="wal", **extra)
    sink = CassandraWalSink(options, _data().schema, f"wal-{table}", str(checkpoint))
    sink.prepare()
    return sink


def test_wal_commit_rides_out_write_timeouts_and_overload(
    faults: tuple[str, int], session: Any, tmp_path: Path
) -> None:
    sink = _wal_sink(faults, session, "wal_ride", tmp_path / "ck")
    vote = sink.write_partition(TaskScope("q", 0, 0, 0), iter([_data()]))
    inject(*faults, "write_timeout", count=3, skip=20, match=_quoted("wal_ride"), applied=True)
    inject(*faults, "write_timeout", count=3, skip=60, match=_quoted("wal_ride"))
    inject(*faults, "overloaded", count=2, skip=100, match=_quoted("wal_ride"))
    sink.commit_batch(0, [vote])
    assert _stored(session, "wal_ride") == _expected()
    assert sink.committer.is_committed(sink.sink_id, 0, 0)
    assert _left(session) == [("write_timeout", 0), ("write_timeout", 0), ("overloaded", 0)]
    stamps = {r.w for r in session.execute("SELECT WRITETIME(name) AS w FROM wal_ride")}
    assert len(stamps) == 1, "a retried INSERT carried another write timestamp"


def test_wal_commit_over_budget_fails_unrecorded_and_its_rerun_completes(
    faults: tuple[str, int], session: Any, tmp_path: Path
) -> None:
    sink = _wal_sink(
        faults, session, "wal_budget", tmp_path / "ck", max_in_flight=1, retry_timeout_ms=0
    )
    vote = sink.write_partition(TaskScope("q", 0, 0, 0), iter([_data()]))
    inject(*faults, "write_timeout", count=MAX_ATTEMPTS, skip=30, match=_quoted("wal_budget"))
    with pytest.raises(WriteTimeout):
        sink.commit_batch(0, [vote])
    stored = set(_stored(session, "wal_budget"))
    assert 30 not in stored and stored >= set(range(30))
    assert not sink.committer.is_committed(sink.sink_id, 0, 0)
    clear(*faults)
    sink.commit_batch(0, [vote])
    assert _stored(session, "wal_budget") == _expected()
    assert sink.committer.is_committed(sink.sink_id, 0, 0)


def test_wal_commit_records_ride_out_overload(
    faults: tuple[str, int], session: Any, tmp_path: Path
) -> None:
    """The commit table's SELECT and INSERT are retried like the data INSERTs."""
    sink = _wal_sink(faults, session, "wal_records", tmp_path / "ck")
    vote = sink.write_partition(TaskScope("q", 0, 0, 0), iter([_data()]))
    inject(*faults, "overloaded", count=MAX_ATTEMPTS - 1, match="firesteel_commits")
    sink.commit_batch(0, [vote])
    assert _left(session) == [("overloaded", 0)]
    assert sink.committer.is_committed(sink.sink_id, 0, 0)
    assert _stored(session, "wal_records") == _expected()


@pytest.mark.parametrize("retry_ms", [30000, 0], ids=["backoff", "no-backoff"])
def test_wal_commit_records_back_off_over_a_dropped_connection(
    faults: tuple[str, int], session: Any, tmp_path: Path, retry_ms: int
) -> None:
    """A drop marks the only node down, so the driver's immediate retries of the commit
    record fail; with backoff the record is written once the driver reconnected. Without,
    the commit fails unrecorded and its re-run completes."""
    table = f"wal_rec_drop_{retry_ms}"
    sink = _wal_sink(faults, session, table, tmp_path / "ck", retry_timeout_ms=retry_ms)
    vote = sink.write_partition(TaskScope("q", 0, 0, 0), iter([_data()]))
    inject(*faults, "drop", count=1, match="firesteel_commits", skip=1)
    if retry_ms == 0:
        with pytest.raises(NoHostAvailable):
            sink.commit_batch(0, [vote])
        _wait_reconnected(sink.options)
    sink.commit_batch(0, [vote])
    assert _left(session) == [("drop", 0)]
    assert sink.committer.is_committed(sink.sink_id, 0, 0)
    assert _stored(session, table) == _expected()


def test_lookups_ride_out_an_overloaded_coordinator(faults: tuple[str, int], session: Any) -> None:
    session.execute("CREATE TABLE dims (id bigint PRIMARY KEY, v text)")
    for key in range(5):
        session.execute("INSERT INTO dims (id, v) VALUES (%s, %s)", (key, f"v{key}"))
    host, port = faults
    spec = LookupSpec(
        contact_points=host,
        port=port,
        keyspace=session.keyspace,
        table="dims",
        on=("id",),
        columns=("v",),
    )
    lookups = Lookups(spec, {"v": pa.string()}, session_for(spec))
    inject(*faults, "overloaded", count=MAX_ATTEMPTS - 1, match=_quoted("dims"))
    out = lookups.enrich(pa.record_batch({"id": pa.array([4, 0, 9], pa.int64())}))
    assert out.column("v").to_pylist() == ["v4", "v0", None]
    assert _left(session) == [("overloaded", 0)]


@pytest.mark.parametrize("retry_timeout", [30.0, 0.0], ids=["backoff", "no-backoff"])
def test_lookups_back_off_over_a_dropped_connection(
    faults: tuple[str, int], session: Any, retry_timeout: float
) -> None:
    """A drop marks the only node down, so the driver's immediate retries fail with
    NoHostAvailable; with backoff the lookups are sent again once the driver reconnected,
    without it the failure policy applies at once."""
    table = f"dims_drop_{int(retry_timeout)}"
    session.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, v text)")
    for key in range(5):
        session.execute(f"INSERT INTO {table} (id, v) VALUES (%s, %s)", (key, f"v{key}"))
    host, port = faults
    spec = LookupSpec(
        contact_points=host,
        port=port,
        keyspace=session.keyspace,
        table=table,
        on=("id",),
        columns=("v",),
        retry_timeout=retry_timeout,
    )
    lookups = Lookups(spec, {"v": pa.string()}, session_for(spec))
    inject(*faults, "drop", count=1, match=_quoted(table))
    batch = pa.record_batch({"id": pa.array([4, 0, 9, 2], pa.int64())})
    if retry_timeout == 0:
        with pytest.raises(CassandraLookupError, match=rf"{table} WHERE id = \d+ failed"):
            lookups.enrich(batch)
        _wait_reconnected(spec)
        return
    assert lookups.enrich(batch).column("v").to_pylist() == ["v4", "v0", None, "v2"]
    assert _left(session) == [("drop", 0)]


# Spark end to end: faults hit the Python workers' sessions.

FILES = 3
ROWS_PER_FILE = 40


@pytest.mark.parametrize("retry_ms", ["30000", "0"], ids=["backoff", "no-backoff"])
def test_streaming_query_under_write_timeouts_and_a_drop_loses_nothing(
    spark: Any, faults: tuple[str, int], session: Any, tmp_path: Path, retry_ms: str
) -> None:
    """Write timeouts are retried inside the running query. The drop marks the node down
    (see IdempotentRetryPolicy): with backoff (the default) the writes are re-sent once the
    driver reconnected and the query completes; without, the drop fails the query and the
    restart from the checkpoint completes."""
    session.execute("CREATE TABLE e2e (k bigint PRIMARY KEY, name text)")
    source = tmp_path / "in"
    source.mkdir()
    for index in range(FILES):
        keys = list(range(index * ROWS_PER_FILE, (index + 1) * ROWS_PER_FILE))
        names = [f"name-{k}" for k in keys]
        pq.write_table(pa.table({"k": keys, "name": names}), source / f"{index}.parquet")
    host, port = faults
    inject(*faults, "write_timeout", count=3, skip=10, match=_quoted("e2e"), applied=True)
    inject(*faults, "write_timeout", count=3, skip=50, match=_quoted("e2e"))
    inject(*faults, "drop", count=1, skip=90, match=_quoted("e2e"))

    def start() -> Any:
        return (
            spark.readStream.schema("k long, name string")
            .option("maxFilesPerTrigger", 1)
            .parquet(str(source))
            .writeStream.format("firesteel.cassandra")
            .option("contact.points", host)
            .option("port", str(port))
            .option("keyspace", session.keyspace)
            .option("table", "e2e")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .option("retry.timeout.ms", retry_ms)
            .trigger(availableNow=True)
            .start()
        )

    if retry_ms == "0":
        with pytest.raises(StreamingQueryException, match="NoHostAvailable"):
            start().awaitTermination(240)
        assert len(_stored(session, "e2e")) < FILES * ROWS_PER_FILE
    again = start()
    again.awaitTermination(240)
    assert again.exception() is None
    assert _left(session) == [("write_timeout", 0), ("write_timeout", 0), ("drop", 0)]
    assert _stored(session, "e2e") == _expected(FILES * ROWS_PER_FILE)
