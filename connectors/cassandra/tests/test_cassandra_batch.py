"""``batch=partition``: rows of one partition key travel in UNLOGGED batches, never across keys.

Requests are counted by the test server itself: a ``slow`` fault rule with no
delay matches every request to the table and counts down once per request
(a BATCH is one request). Rows are read back through cassandra-driver.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from cassandra import WriteTimeout
from cassandra.policies import WriteType

from firesteel.cassandra.client import MAX_ATTEMPTS
from firesteel.cassandra.options import CassandraSinkOptions
from firesteel.cassandra.sink import CassandraUpsertSink
from firesteel.cassandra.wal import CassandraWalSink
from firesteel.core.context import TaskScope
from firesteel.core.errors import ConfigError
from firesteel.core.options import parse_options
from firesteel.testing.cassandra import HOSTS_ENV, clear, inject

COUNTER = 1_000_000
SERIES = {"a": 50, "b": 40, "c": 3}
SINGLES = 5


@pytest.fixture
def faults(cluster_address: tuple[str, int]) -> Iterator[tuple[str, int]]:
    if os.environ.get(HOSTS_ENV):
        pytest.skip("counting requests needs the test server, not a real cluster")
    yield cluster_address
    clear(*cluster_address)


def _rows() -> pa.RecordBatch:
    """Three sensors with many readings, interleaved, and single-reading sensors."""
    sensors, ats = [], []
    for at in range(max(SERIES.values())):
        for sensor, count in SERIES.items():
            if at < count:
                sensors.append(sensor)
                ats.append(at)
    for single in range(SINGLES):
        sensors.append(f"single-{single}")
        ats.append(0)
    values = [f"{s}@{a}" for s, a in zip(sensors, ats, strict=True)]
    return pa.record_batch({"sensor": sensors, "at": pa.array(ats, pa.int64()), "v": values})


def _table(session: Any, name: str) -> None:
    session.execute(
        f"CREATE TABLE {name} (sensor text, at bigint, v text, PRIMARY KEY ((sensor), at))"
    )


def _options(address: tuple[str, int], keyspace: str, table: str, **extra: Any) -> Any:
    host, port = address
    return CassandraSinkOptions(
        contact_points=host, port=port, keyspace=keyspace, table=table, **extra
    )


def _requests(session: Any) -> int:
    (rule,) = session.execute("SELECT remaining FROM firesteel_faults.rules")
    return COUNTER - rule.remaining


def _stored(session: Any, table: str) -> dict[tuple[str, int], str]:
    return {(r.sensor, r.at): r.v for r in session.execute(f"SELECT sensor, at, v FROM {table}")}


def _expected() -> dict[tuple[str, int], str]:
    batch = _rows().to_pylist()
    return {(r["sensor"], r["at"]): r["v"] for r in batch}


@pytest.mark.parametrize(
    ("batch", "rows", "requests"),
    [
        ("none", 32, sum(SERIES.values()) + SINGLES),
        # a: 32 + 18, b: 32 + 8, c: 3, singles alone.
        ("partition", 32, 2 + 2 + 1 + SINGLES),
        ("partition", 2, 25 + 20 + 2 + SINGLES),
    ],
)
def test_rows_of_a_partition_share_requests(
    faults: tuple[str, int], session: Any, batch: str, rows: int, requests: int
) -> None:
    table = f"series_{batch}_{rows}"
    _table(session, table)
    options = _options(faults, session.keyspace, table, batch=batch, batch_rows=rows)
    sink = CassandraUpsertSink(options, _rows().schema, "batch")
    sink.prepare()
    inject(*faults, "slow", count=COUNTER, match=f'"{table}"')
    assert sink.write(TaskScope("q", 0, 0, 0), iter([_rows()])) == len(_expected())
    assert _requests(session) == requests
    assert _stored(session, table) == _expected()


def test_a_failed_batch_fails_the_task_as_an_unlogged_batch_and_its_rerun_completes(
    faults: tuple[str, int], session: Any
) -> None:
    _table(session, "series_fail")
    options = _options(
        faults,
        session.keyspace,
        "series_fail",
        batch="partition",
        max_in_flight=1,
        retry_timeout_ms=0,
    )
    sink = CassandraUpsertSink(options, _rows().schema, "batch")
    sink.prepare()
    inject(*faults, "write_timeout", count=MAX_ATTEMPTS, skip=1, match='"series_fail"')
    with pytest.raises(WriteTimeout) as failed:
        sink.write(TaskScope("q", 0, 0, 0), iter([_rows()]))
    assert failed.value.write_type == WriteType.UNLOGGED_BATCH
    clear(*faults)
    sink.write(TaskScope("q", 0, 0, 0), iter([_rows()]))
    assert _stored(session, "series_fail") == _expected()


def test_wal_batches_carry_the_batch_stamp(
    faults: tuple[str, int], session: Any, tmp_path: Any
) -> None:
    _table(session, "series_wal")
    options = _options(
        faults,
        session.keyspace,
        "series_wal",
        mode="wal",
        batch="partition",
        batch_rows=16,
        max_in_flight=20,  # one send chunk holds every row
    )
    sink = CassandraWalSink(options, _rows().schema, "wal-batch", str(tmp_path / "ck"))
    sink.prepare()
    vote = sink.write_partition(TaskScope("q", 0, 0, 0), iter([_rows()]))
    inject(*faults, "slow", count=COUNTER, match='"series_wal"')
    sink.commit_batch(0, [vote])
    assert _stored(session, "series_wal") == _expected()
    assert _requests(session) == 4 + 3 + 1 + SINGLES
    stamps = {r.w for r in session.execute("SELECT WRITETIME(v) AS w FROM series_wal")}
    assert stamps == {sink.write_stamp(0)}


def test_batch_options_are_checked() -> None:
    base = {"contact.points": "127.0.0.1", "keyspace": "k", "table": "t"}
    with pytest.raises(ConfigError, match=r"batch"):
        parse_options(
            CassandraSinkOptions, {**base, "batch": "rows"}, connector="firesteel.cassandra"
        )
    with pytest.raises(ConfigError, match=r"batch\.rows"):
        parse_options(
            CassandraSinkOptions, {**base, "batch.rows": "0"}, connector="firesteel.cassandra"
        )
