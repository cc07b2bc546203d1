"""The CQL test server as the real cassandra-driver sees it."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, get_args

import pytest
from cassandra import (
    AlreadyExists,
    ConsistencyLevel,
    InvalidRequest,
    OperationTimedOut,
    ReadTimeout,
    Unavailable,
    WriteTimeout,
    WriteType,
)
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.connection import ConnectionShutdown
from cassandra.policies import FallthroughRetryPolicy, RoundRobinPolicy
from cassandra.protocol import OverloadedErrorMessage
from cassandra.query import BatchStatement, BatchType, SimpleStatement

from firesteel.testing.cassandra import (
    HOSTS_ENV,
    FaultKind,
    clear,
    connect,
    inject,
    start_server,
)
from firesteel.testing.cassandra.faults import KINDS
from firesteel.testing.cassandra.server import serve
from firesteel.testing.ports import free_port


def test_types_round_trip(session: Any) -> None:
    session.execute(
        "CREATE TABLE kv (k text, c int, v bigint, d double, b boolean, bl blob, u uuid, "
        "l list<text>, PRIMARY KEY ((k), c))"
    )
    u = uuid.uuid4()
    ins = session.prepare(
        "INSERT INTO kv (k, c, v, d, b, bl, u, l) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    )
    session.execute(ins, ("a", 1, 2**40, 1.5, True, b"\x00\x01", u, ["x", "y"]))
    session.execute("INSERT INTO kv (k, c, v) VALUES ('it''s', 2, -7)")
    rows = {(r.k, r.c): r for r in session.execute("SELECT * FROM kv")}
    assert rows[("a", 1)].v == 2**40
    assert rows[("a", 1)].l == ["x", "y"]
    assert rows[("a", 1)].u == u
    assert rows[("a", 1)].bl == b"\x00\x01"
    assert rows[("it's", 2)].v == -7
    assert rows[("it's", 2)].d is None


def test_last_write_wins_by_client_timestamp(session: Any) -> None:
    session.execute("CREATE TABLE lww (k int PRIMARY KEY, v text)")
    session.execute("INSERT INTO lww (k, v) VALUES (1, 'new') USING TIMESTAMP 200")
    session.execute("INSERT INTO lww (k, v) VALUES (1, 'old') USING TIMESTAMP 100")
    assert session.execute("SELECT v FROM lww WHERE k = 1").one().v == "new"


def test_writetime_reports_the_winning_cells_timestamp(session: Any) -> None:
    session.execute("CREATE TABLE wt (k int PRIMARY KEY, v text, n int)")
    session.execute("INSERT INTO wt (k, v) VALUES (1, 'a') USING TIMESTAMP 300")
    session.execute("INSERT INTO wt (k, v) VALUES (1, 'b') USING TIMESTAMP 250")
    row = session.execute("SELECT v, WRITETIME(v) AS w, writetime(n) FROM wt").one()
    assert (row.v, row.w, row.writetime_n) == ("a", 300, None)
    with pytest.raises(InvalidRequest, match="PRIMARY KEY part k"):
        session.execute("SELECT WRITETIME(k) FROM wt")


def test_unset_does_not_overwrite_null_does(session: Any) -> None:
    session.execute("CREATE TABLE un (k int PRIMARY KEY, a text, b text)")
    session.execute("INSERT INTO un (k, a, b) VALUES (1, 'a', 'b')")
    from cassandra.query import UNSET_VALUE

    ins = session.prepare("INSERT INTO un (k, a, b) VALUES (?, ?, ?)")
    session.execute(ins, (1, UNSET_VALUE, None))
    row = session.execute("SELECT * FROM un WHERE k = 1").one()
    assert (row.a, row.b) == ("a", None)


def test_counters_add_and_count(session: Any) -> None:
    session.execute("CREATE TABLE cnt (k text PRIMARY KEY, n counter)")
    upd = session.prepare("UPDATE cnt SET n = n + ? WHERE k = ?")
    execute_concurrent_with_args(session, upd, [(1, "a")] * 50 + [(2, "b")] * 5)
    assert {r.k: r.n for r in session.execute("SELECT * FROM cnt")} == {"a": 50, "b": 10}


def test_unlogged_batch_and_count(session: Any) -> None:
    session.execute("CREATE TABLE bt (k int, c int, PRIMARY KEY (k, c))")
    ins = session.prepare("INSERT INTO bt (k, c) VALUES (?, ?)")
    batch = BatchStatement(batch_type=BatchType.UNLOGGED)
    for c in range(10):
        batch.add(ins, (7, c))
    session.execute(batch)
    assert session.execute("SELECT count(*) FROM bt WHERE k = 7").one().count == 10


def test_ttl_expires(session: Any) -> None:
    session.execute("CREATE TABLE tt (k int PRIMARY KEY, v int)")
    session.execute("INSERT INTO tt (k, v) VALUES (1, 1) USING TTL 1")
    session.execute("INSERT INTO tt (k, v) VALUES (2, 2)")
    assert session.execute("SELECT count(*) FROM tt").one().count == 2
    # Polled, not slept: expiry is seen as soon as it happens, however slow the machine.
    _until(lambda: _keys(session, "tt") == [2], "the row with a TTL of 1 s never expired")


def test_errors_are_the_drivers_exceptions(session: Any) -> None:
    session.execute("CREATE TABLE ex (k int PRIMARY KEY)")
    with pytest.raises(AlreadyExists):
        session.execute("CREATE TABLE ex (k int PRIMARY KEY)")
    with pytest.raises(InvalidRequest, match="unconfigured table nope"):
        session.execute("SELECT * FROM nope")
    with pytest.raises(InvalidRequest, match="Undefined column name zz"):
        session.prepare("INSERT INTO ex (k, zz) VALUES (?, ?)")


def test_server_runs_as_its_own_process() -> None:
    """``python -m firesteel.testing.cassandra PORT`` serves until killed by PID."""
    proc, port = start_server()
    try:
        sess: Any = connect("127.0.0.1", port)
        sess.execute(
            "CREATE KEYSPACE r WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 1}"
        )
        sess.execute("CREATE TABLE r.t (k int PRIMARY KEY)")
        ins = sess.prepare("INSERT INTO r.t (k) VALUES (?)")
        sess.execute(ins, (1,))
        assert sess.execute("SELECT count(*) FROM r.t").one().count == 1
    finally:
        sess.cluster.shutdown()
        proc.kill()
        proc.wait()


# Injected faults (firesteel.testing.cassandra.faults), seen through the real driver.


@pytest.fixture
def faults(cluster_address: tuple[str, int]) -> Iterator[tuple[str, int]]:
    """The test server's address; every fault rule is cleared afterwards."""
    if os.environ.get(HOSTS_ENV):
        pytest.skip("fault injection needs the test server, not a real cluster")
    yield cluster_address
    clear(*cluster_address)


@pytest.fixture
def raw(session: Any, cluster_address: tuple[str, int]) -> Iterator[Any]:
    """A session in ``session``'s keyspace that never retries, so every error surfaces as is."""
    host, port = cluster_address
    profile = ExecutionProfile(
        load_balancing_policy=RoundRobinPolicy(), retry_policy=FallthroughRetryPolicy()
    )
    cluster = Cluster(
        [host], port=port, protocol_version=4, execution_profiles={EXEC_PROFILE_DEFAULT: profile}
    )
    sess = cluster.connect(session.keyspace)
    yield sess
    cluster.shutdown()


def _keys(session: Any, table: str) -> list[int]:
    return sorted(r.k for r in session.execute(f"SELECT k FROM {table}"))


def _remaining(session: Any, rule: str) -> tuple[int, int]:
    row = session.execute(
        "SELECT remaining, skip FROM firesteel_faults.rules WHERE id = %s", (rule,)
    ).one()
    return row.remaining, row.skip


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("write_timeout", WriteTimeout),
        ("unavailable", Unavailable),
        ("overloaded", OverloadedErrorMessage),
        ("drop", ConnectionShutdown),
    ],
)
def test_an_error_fault_surfaces_as_the_drivers_exception_and_writes_nothing(
    faults: tuple[str, int], raw: Any, kind: FaultKind, error: type[Exception]
) -> None:
    raw.execute("CREATE TABLE fe (k int PRIMARY KEY, v text)")
    ins = raw.prepare("INSERT INTO fe (k, v) VALUES (?, ?)")
    inject(*faults, kind, count=1, match="INTO fe ")
    with pytest.raises(error):
        raw.execute(ins, (1, "a"))
    if kind == "drop":
        _wait_up(raw)
    raw.execute(ins, (2, "b"))
    assert _keys(raw, "fe") == [2]


def test_write_timeout_carries_the_v4_error_body(faults: tuple[str, int], raw: Any) -> None:
    raw.execute("CREATE TABLE fb (k int PRIMARY KEY)")
    inject(*faults, "write_timeout", count=1, match="fb")
    with pytest.raises(WriteTimeout) as caught:
        raw.execute(
            SimpleStatement("INSERT INTO fb (k) VALUES (1)", consistency_level=ConsistencyLevel.ALL)
        )
    assert caught.value.consistency == ConsistencyLevel.ALL
    assert (caught.value.received_responses, caught.value.required_responses) == (0, 1)
    assert caught.value.write_type == WriteType.SIMPLE


def test_read_timeout_fails_a_select(faults: tuple[str, int], raw: Any) -> None:
    raw.execute("CREATE TABLE fr (k int PRIMARY KEY)")
    raw.execute("INSERT INTO fr (k) VALUES (1)")
    inject(*faults, "read_timeout", count=1, match="FROM fr")
    with pytest.raises(ReadTimeout):
        raw.execute("SELECT * FROM fr WHERE k = 1")
    assert _keys(raw, "fr") == [1]


def test_an_applied_write_timeout_writes_then_fails(faults: tuple[str, int], raw: Any) -> None:
    raw.execute("CREATE TABLE fa (k int PRIMARY KEY, v text)")
    ins = raw.prepare("INSERT INTO fa (k, v) VALUES (?, ?)")
    inject(*faults, "write_timeout", count=1, match="fa", applied=True)
    with pytest.raises(WriteTimeout):
        raw.execute(ins, (1, "a"))
    assert _keys(raw, "fa") == [1]


def test_an_applied_drop_writes_then_closes_the_connection(
    faults: tuple[str, int], raw: Any
) -> None:
    raw.execute("CREATE TABLE fd (k int PRIMARY KEY)")
    inject(*faults, "drop", count=1, match="fd", applied=True)
    with pytest.raises(ConnectionShutdown):
        raw.execute("INSERT INTO fd (k) VALUES (1)")
    _wait_up(raw)
    assert _keys(raw, "fd") == [1]


def test_slow_holds_the_reply_past_a_short_client_timeout(
    faults: tuple[str, int], raw: Any, session: Any
) -> None:
    raw.execute("CREATE TABLE fs (k int PRIMARY KEY)")
    inject(*faults, "slow", count=1, match="INTO fs", delay_ms=1500)
    start = time.monotonic()
    insert = raw.execute_async("INSERT INTO fs (k) VALUES (1)", timeout=0.3)
    # Executed at once: another connection sees it while the reply is still held (the
    # insert's reply cannot come before start + 1.5 s: that bound is the fault's own)...
    executed = "the slow insert was not executed before its reply was due"
    _until(lambda: _keys(session, "fs") == [1], executed, start + 1.5)
    with pytest.raises(OperationTimedOut):
        insert.result()
    # ...and the later replies on its connection queue behind it.
    assert _keys(raw, "fs") == [1]
    assert time.monotonic() - start >= 1.5


def test_count_expires_and_skip_lets_the_first_through(faults: tuple[str, int], raw: Any) -> None:
    raw.execute("CREATE TABLE fc (k int PRIMARY KEY)")
    ins = raw.prepare("INSERT INTO fc (k) VALUES (?)")
    rule = inject(*faults, "write_timeout", count=2, skip=1, match="fc")
    outcomes = []
    for k in range(5):
        try:
            raw.execute(ins, (k,))
            outcomes.append("ok")
        except WriteTimeout:
            outcomes.append("timeout")
    assert outcomes == ["ok", "timeout", "timeout", "ok", "ok"]
    assert _keys(raw, "fc") == [0, 3, 4]
    assert _remaining(raw, rule) == (0, 0)


def test_match_is_a_case_insensitive_substring_of_the_prepared_text(
    faults: tuple[str, int], raw: Any
) -> None:
    raw.execute("CREATE TABLE fm_a (k int PRIMARY KEY)")
    raw.execute("CREATE TABLE fm_b (k int PRIMARY KEY)")
    a = raw.prepare("INSERT INTO fm_a (k) VALUES (?)")
    b = raw.prepare("INSERT INTO fm_b (k) VALUES (?)")
    rule = inject(*faults, "overloaded", count=1, match="into FM_B")
    raw.execute(a, (1,))
    raw.execute("SELECT * FROM fm_b")
    with pytest.raises(OverloadedErrorMessage):
        raw.execute(b, (1,))
    raw.execute(b, (2,))
    assert (_keys(raw, "fm_a"), _keys(raw, "fm_b")) == ([1], [2])
    assert _remaining(raw, rule) == (0, 0)


def test_a_batch_is_faulted_whole_with_its_batch_write_type(
    faults: tuple[str, int], raw: Any
) -> None:
    raw.execute("CREATE TABLE fbt (k int PRIMARY KEY)")
    raw.execute("CREATE TABLE fbo (k int PRIMARY KEY)")
    batch = BatchStatement(batch_type=BatchType.UNLOGGED)
    batch.add(raw.prepare("INSERT INTO fbo (k) VALUES (?)"), (1,))
    batch.add(raw.prepare("INSERT INTO fbt (k) VALUES (?)"), (2,))
    inject(*faults, "write_timeout", count=1, match="fbt")
    with pytest.raises(WriteTimeout) as caught:
        raw.execute(batch)
    assert caught.value.write_type == WriteType.UNLOGGED_BATCH
    assert (_keys(raw, "fbo"), _keys(raw, "fbt")) == ([], [])


def test_clear_disarms_and_schema_use_and_rules_are_never_faulted(
    faults: tuple[str, int], raw: Any
) -> None:
    inject(*faults, "drop", count=100, match="")
    raw.execute("CREATE TABLE fx (k int PRIMARY KEY)")
    raw.execute(f"USE {raw.keyspace}")
    assert raw.execute("SELECT count(*) FROM firesteel_faults.rules").one().count == 1
    clear(*faults)
    assert raw.execute("SELECT count(*) FROM firesteel_faults.rules").one().count == 0
    raw.execute("INSERT INTO fx (k) VALUES (1)")
    assert _keys(raw, "fx") == [1]


def test_a_rule_the_server_would_never_fire_is_refused(faults: tuple[str, int]) -> None:
    assert set(get_args(FaultKind)) == set(KINDS)
    with pytest.raises(InvalidRequest, match="fault kind 'write_timout'"):
        inject(*faults, "write_timout", count=1)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="'applied' is for write_timeout and drop"):
        inject(*faults, "overloaded", count=1, applied=True)


def test_faulted_statements_are_counted_only_when_executed() -> None:
    """Store.statements / rows_written count what ran: a refused write is not in them."""
    server = serve(free_port())
    sess: Any = connect("127.0.0.1", server.port)
    try:
        sess.execute(
            "CREATE KEYSPACE n WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 1}"
        )
        sess.execute("CREATE TABLE n.t (k int PRIMARY KEY)")
        ins = sess.prepare("INSERT INTO n.t (k) VALUES (?)")
        inject("127.0.0.1", server.port, "write_timeout", count=1, match="n.t")
        inject("127.0.0.1", server.port, "write_timeout", count=1, match="n.t", applied=True)
        before = (server.store.statements, server.store.rows_written)
        for k in (1, 2, 3):
            with contextlib.suppress(WriteTimeout):
                sess.execute(ins, (k,))
        after = (server.store.statements, server.store.rows_written)
        assert (after[0] - before[0], after[1] - before[1]) == (2, 2)
        assert sorted(r.k for r in sess.execute("SELECT k FROM n.t")) == [2, 3]
    finally:
        sess.cluster.shutdown()
        server.shutdown()
        server.server_close()


def _until(condition: Callable[[], bool], failure: str, deadline: float | None = None) -> None:
    """Poll ``condition`` until it holds; fail with ``failure`` unless it held before
    ``deadline`` (a ``time.monotonic()`` stamp, 30 s from now by default)."""
    deadline = time.monotonic() + 30 if deadline is None else deadline
    while True:
        held = condition()
        # Read after the condition returned: what it saw was true by then.
        assert time.monotonic() < deadline, failure
        if held:
            return
        time.sleep(0.02)


def _wait_up(session: Any, timeout: float = 20.0) -> None:
    """Until the driver has reconnected to every node a dropped connection marked down."""
    deadline = time.monotonic() + timeout
    while True:
        pools = session.get_pool_state()
        hosts = session.cluster.metadata.all_hosts()
        if all(h.is_up and pools.get(h, {}).get("open_count", 0) for h in hosts):
            return
        assert time.monotonic() < deadline, "the driver did not reconnect"
        time.sleep(0.05)
