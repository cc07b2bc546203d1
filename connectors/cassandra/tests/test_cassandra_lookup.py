"""firesteel.cassandra.lookup on batch and streaming DataFrames, its policies and its errors.

Rows are written and checked through cassandra-driver and Spark, never through the lookup.
"""

from __future__ import annotations

import datetime as dt
import socket
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from firesteel.cassandra import lookup
from firesteel.cassandra.errors import (
    CassandraLookupError,
    CassandraSchemaError,
    CassandraUnreachableError,
)
from firesteel.cassandra.lookups import Lookups, LookupSpec
from firesteel.core.errors import ConfigError
from firesteel.testing.cassandra import connect, start_server

UID = uuid.UUID("12345678-1234-5678-1234-567812345678")
SEEN = dt.datetime(2026, 11, 23, 8, 30, tzinfo=dt.timezone.utc)


def _users(session: Any) -> None:
    session.execute(
        "CREATE TABLE users (id bigint, region text, name text, tags list<text>, uid uuid, "
        "seen timestamp, attrs map<text, bigint>, PRIMARY KEY ((id), region))"
    )
    insert = session.prepare(
        "INSERT INTO users (id, region, name, tags, uid, seen, attrs) VALUES (?, ?, ?, ?, ?, ?, ?)"
    )
    for i in range(1, 6):
        session.execute(insert, (i, "eu", f"user-{i}", [f"t{i}", "x"], UID, SEEN, {"n": i}))
    session.execute(insert, (1, "us", "user-1-us", None, None, None, None))


def _cluster(cluster_address: tuple[str, int], session: Any) -> dict[str, Any]:
    host, port = cluster_address
    return {"contact_points": host, "port": port, "keyspace": session.keyspace}


def test_lookup_adds_the_matching_row_in_input_order(
    spark: Any, session: Any, cluster_address: tuple[str, int]
) -> None:
    _users(session)
    keys = [(3, "eu", "a"), (1, "us", "b"), (9, "eu", "c"), (None, "eu", "d"), (1, "eu", "e")]
    df = spark.createDataFrame(keys, "id long, region string, tag string").coalesce(1)
    out = lookup(
        df,
        **_cluster(cluster_address, session),
        table="users",
        on=["id", "region"],
        columns=["name", "tags", "uid", "seen", "attrs"],
        max_in_flight=2,
    )
    assert out.columns == ["id", "region", "tag", "name", "tags", "uid", "seen", "attrs"]
    rows = [r.asDict() for r in out.collect()]
    assert [r["tag"] for r in rows] == ["a", "b", "c", "d", "e"]
    assert [r["name"] for r in rows] == ["user-3", "user-1-us", None, None, "user-1"]
    assert rows[0]["tags"] == ["t3", "x"]
    assert rows[0]["uid"] == str(UID)
    assert rows[0]["attrs"] == {"n": 3}
    assert rows[1]["tags"] is None
    seen = rows[4]["seen"]
    assert seen.replace(tzinfo=None) == SEEN.astimezone().replace(tzinfo=None)


def test_missing_rows_can_be_dropped_and_a_partial_key_takes_the_first_row(
    spark: Any, session: Any, cluster_address: tuple[str, int]
) -> None:
    _users(session)
    df = spark.createDataFrame([(1,), (7,), (2,)], "id long").coalesce(1)
    out = lookup(
        df,
        **_cluster(cluster_address, session),
        table="users",
        on=["id"],
        columns=["region", "name"],
        missing="drop",
    )
    assert [tuple(r) for r in out.collect()] == [(1, "eu", "user-1"), (2, "eu", "user-2")]


def test_lookup_in_a_streaming_query(
    spark: Any, session: Any, cluster_address: tuple[str, int], tmp_path: Path
) -> None:
    _users(session)
    source = tmp_path / "in"
    source.mkdir()
    for index, ids in enumerate([[5, 4], [8, 2, 1]]):
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), source / f"{index}.parquet")
    stream = spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).parquet(str(source))
    enriched = lookup(
        stream.selectExpr("id", "'eu' AS region"),
        **_cluster(cluster_address, session),
        table="users",
        on=["id", "region"],
        columns=["name"],
    )
    query = (
        enriched.writeStream.format("memory")
        .queryName("lookup_stream")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    rows = {r.id: r.name for r in spark.table("lookup_stream").collect()}
    assert rows == {5: "user-5", 4: "user-4", 8: None, 2: "user-2", 1: "user-1"}


def test_bad_lookups_are_refused_on_the_driver_naming_the_culprit(
    spark: Any, session: Any, cluster_address: tuple[str, int]
) -> None:
    _users(session)
    cluster = _cluster(cluster_address, session)
    df = spark.createDataFrame([("1", "eu", "n")], "id string, region string, name string")
    by_key = {"on": ["region"], "columns": ["uid"]}
    with pytest.raises(CassandraSchemaError, match="nope"):
        lookup(df, **cluster, table="nope", **by_key)
    with pytest.raises(CassandraSchemaError, match="zz"):
        lookup(df, **cluster, table="users", on=["region"], columns=["zz"])
    with pytest.raises(CassandraSchemaError, match=r"key column 'id' is string .* bigint"):
        lookup(df, **cluster, table="users", on=["id", "region"], columns=["uid"])
    with pytest.raises(CassandraSchemaError, match=r"already has columns \['name'\]"):
        lookup(df, **cluster, table="users", on=["region"], columns=["name"])
    with pytest.raises(CassandraSchemaError, match=r"\['missing'\] are not in the DataFrame"):
        lookup(df, **cluster, table="users", on=["missing"], columns=["uid"])
    with pytest.raises(ConfigError, match="'missing' is null or drop"):
        lookup(df, **cluster, table="users", **by_key, missing="keep")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_in_flight"):
        lookup(df, **cluster, table="users", **by_key, max_in_flight=0)
    with pytest.raises(ConfigError, match="cassandra"):
        lookup(df, **cluster, table="users", **by_key, options={"user": "x"})


def test_an_unreachable_cluster_names_the_hosts(spark: Any) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    df = spark.createDataFrame([(1,)], "id long")
    with pytest.raises(CassandraUnreachableError, match=f"127.0.0.1:{port}"):
        lookup(
            df,
            contact_points="127.0.0.1",
            port=port,
            keyspace="k",
            table="t",
            on=["id"],
            columns=["v"],
            options={"cassandra.connect.timeout": "1"},
        )


def test_failed_lookups_fail_the_task_or_become_nulls_with_the_error() -> None:
    """The server dies after the worker prepared: every lookup fails inside the driver."""
    process, port = start_server()
    admin: Any = None
    try:
        admin = connect("127.0.0.1", port)
        admin.execute(  # type: ignore[attr-defined]
            "CREATE KEYSPACE k WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 1}"
        )
        admin.execute("CREATE TABLE k.t (id bigint PRIMARY KEY, v text)")  # type: ignore[attr-defined]
        admin.execute("INSERT INTO k.t (id, v) VALUES (1, 'one')")  # type: ignore[attr-defined]
        common = {"contact_points": "127.0.0.1", "port": port, "keyspace": "k", "table": "t"}
        # No backoff: the server stays dead, so waiting out retry_timeout proves nothing.
        at_once = {**common, "on": ("id",), "columns": ("v",), "timeout": 1.0, "retry_timeout": 0}
        failing = LookupSpec(**at_once)
        nulling = LookupSpec(**at_once, on_error="null")
        out_types = {"v": pa.string()}
        batch = pa.record_batch({"id": pa.array([1, 2], pa.int64())})
        session = admin
        strict, lenient = Lookups(failing, out_types, session), Lookups(nulling, out_types, session)
        assert strict.enrich(batch).column("v").to_pylist() == ["one", None]
        process.kill()
        process.wait()
        with pytest.raises(CassandraLookupError, match=r"k\.t WHERE id = 1 failed"):
            strict.enrich(batch)
        out = lenient.enrich(batch)
        assert out.column("id").to_pylist() == [1, 2]
        assert out.column("v").to_pylist() == [None, None]
        assert all(out.column("lookup_error").to_pylist())
    finally:
        if admin is not None:
            admin.cluster.shutdown()
        process.kill()
        process.wait()
