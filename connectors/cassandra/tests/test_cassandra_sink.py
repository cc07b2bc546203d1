"""The upsert sink end to end: Spark's file source -> Cassandra, read back by the driver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from firesteel.cassandra.errors import (
    CassandraLookupError,
    CassandraRecordError,
    CassandraSchemaError,
    CassandraUnreachableError,
)
from firesteel.core.errors import ConfigError, FiresteelError, RecordError


@pytest.mark.parametrize(
    ("error", "bases"),
    [
        (CassandraSchemaError, (ConfigError, ValueError)),
        (CassandraUnreachableError, (ConnectionError,)),
        (CassandraRecordError, (RecordError, ValueError)),
        (CassandraLookupError, (RuntimeError,)),
    ],
)
def test_every_error_is_a_firesteel_error(
    error: type[Exception], bases: tuple[type[Exception], ...]
) -> None:
    assert issubclass(error, FiresteelError)
    assert all(issubclass(error, base) for base in bases)


def _start(spark: Any, source: Path, ck: Path, options: dict[str, str], schema: str) -> Any:
    writer = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(source))
        .writeStream.format("firesteel.cassandra")
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer.option("checkpointLocation", str(ck)).trigger(availableNow=True).start()


def test_upsert_sink_writes_every_row_once(
    spark: Any, session: Any, cluster_address: tuple[str, int], tmp_path: Path
) -> None:
    session.execute(
        "CREATE TABLE up (k bigint PRIMARY KEY, name text, score double, t int, "
        "attrs map<text, bigint>)"
    )
    session.execute("INSERT INTO up (k, name, score) VALUES (0, 'keep', 9.0)")
    source = tmp_path / "in"
    source.mkdir()
    for index in range(3):
        ks = list(range(index * 10, index * 10 + 10))
        names = [None if k == 0 else f"n{k}" for k in ks]
        table = pa.table(
            {
                "k": ks,
                "name": names,
                "score": [float(k) for k in ks],
                "t": pa.array([60] * 10, pa.int32()),
                "attrs": pa.array([[("k", k)] for k in ks], pa.map_(pa.string(), pa.int64())),
            }
        )
        pq.write_table(table, source / f"part-{index}.parquet")
    host, port = cluster_address
    options = {
        "contact.points": host,
        "port": str(port),
        "keyspace": session.keyspace,
        "table": "up",
        "ttl.column": "t",
        "guarantee": "exactly-once",
    }
    query = _start(
        spark,
        source,
        tmp_path / "ck",
        options,
        "k long, name string, score double, t int, attrs map<string, bigint>",
    )
    query.awaitTermination(120)
    assert query.exception() is None
    rows = {r.k: r for r in session.execute("SELECT * FROM up")}
    assert sorted(rows) == list(range(30))
    assert rows[0].name == "keep"  # a null is UNSET: no tombstone over the earlier value
    assert rows[7].name == "n7"
    assert rows[7].attrs == {"k": 7}  # a Spark map column binds to a CQL map
    assert rows[7].t is None  # the TTL column drives USING TTL, it is not a table column


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tabel": "x"}, "tabel"),
        ({"consistency": "most"}, "consistency"),
        ({"table": "nope"}, "unconfigured table nope"),
        ({"port": "1"}, "contact.points"),
        ({"max.in.flight": "0"}, "max.in.flight"),
    ],
)
def test_bad_options_and_targets_are_named(
    spark: Any,
    session: Any,
    cluster_address: tuple[str, int],
    tmp_path: Path,
    options: dict[str, str],
    message: str,
) -> None:
    session.execute("CREATE TABLE IF NOT EXISTS bad (k bigint PRIMARY KEY, v text)")
    host, port = cluster_address
    base = {"contact.points": host, "port": str(port), "keyspace": session.keyspace, "table": "bad"}
    writer = spark.readStream.format("rate").load().selectExpr("value AS k").writeStream
    writer = writer.format("firesteel.cassandra")
    for key, value in {**base, **options}.items():
        writer = writer.option(key, value)
    query = writer.option("checkpointLocation", str(tmp_path / "ck")).start()
    with pytest.raises(Exception, match=message):
        query.awaitTermination(60)


def test_a_column_the_table_lacks_or_cannot_hold_is_named(
    spark: Any, session: Any, cluster_address: tuple[str, int], tmp_path: Path
) -> None:
    session.execute("CREATE TABLE typed (k bigint PRIMARY KEY, v int)")
    host, port = cluster_address
    base = {
        "contact.points": host,
        "port": str(port),
        "keyspace": session.keyspace,
        "table": "typed",
    }
    for expr, message in (
        ("'x' AS v", "column 'v' is string"),
        ("1 AS w", "Undefined column name w"),
    ):
        writer = spark.readStream.format("rate").load().selectExpr("value AS k", expr).writeStream
        writer = writer.format("firesteel.cassandra")
        for key, value in base.items():
            writer = writer.option(key, value)
        query = writer.option("checkpointLocation", str(tmp_path / expr[-1])).start()
        with pytest.raises(Exception, match=message):
            query.awaitTermination(60)
