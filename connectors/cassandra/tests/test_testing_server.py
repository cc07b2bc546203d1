"""The CQL test server as the real cassandra-driver sees it."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from cassandra import AlreadyExists, InvalidRequest
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.query import BatchStatement, BatchType

from firesteel.cassandra.testing import connect, start_server


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
    import time

    session.execute("CREATE TABLE tt (k int PRIMARY KEY, v int)")
    session.execute("INSERT INTO tt (k, v) VALUES (1, 1) USING TTL 1")
    assert session.execute("SELECT count(*) FROM tt").one().count == 1
    time.sleep(1.2)
    assert session.execute("SELECT count(*) FROM tt").one().count == 0


def test_errors_are_the_drivers_exceptions(session: Any) -> None:
    session.execute("CREATE TABLE ex (k int PRIMARY KEY)")
    with pytest.raises(AlreadyExists):
        session.execute("CREATE TABLE ex (k int PRIMARY KEY)")
    with pytest.raises(InvalidRequest, match="unconfigured table nope"):
        session.execute("SELECT * FROM nope")
    with pytest.raises(InvalidRequest, match="Undefined column name zz"):
        session.prepare("INSERT INTO ex (k, zz) VALUES (?, ?)")


def test_server_runs_as_its_own_process() -> None:
    """``python -m firesteel.cassandra.testing PORT`` serves until killed by PID."""
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
