"""The Cassandra sinks run the sink conformance suite: upsert, write-ahead log (INSERT and
counter tables), against the CQL test server, read back through cassandra-driver, with the
server's count of writes per row (a re-sent INSERT leaves the table as it was).

A real cluster (``FIRESTEEL_CASSANDRA_HOSTS``) keeps no such count: there the cases judge
by the table alone."""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from firesteel.cassandra.connector import CassandraConnector
from firesteel.core.guarantee import Guarantee
from firesteel.testing.cassandra import HOSTS_ENV
from firesteel.testing.cassandra.tally import write_counts
from firesteel.testing.sink_suite import SinkCase, SinkSuite

README = Path(__file__).parents[3] / "docs" / "features.md"
_tables = itertools.count()


@dataclass(frozen=True)
class Variant:
    """One sink of the connector: its options, its table, the docs/features.md row stating it."""

    name: str
    claims: Guarantee
    options: dict[str, str]
    columns: str
    readme_row: str


VARIANTS = [
    Variant("upsert", Guarantee.EXACTLY_ONCE, {}, "n bigint", "Cassandra upsert sink"),
    Variant(
        "wal",
        Guarantee.EXACTLY_ONCE,
        {"mode": "wal"},
        "n bigint",
        "Cassandra write-ahead-log sink",
    ),
    Variant(
        "wal-counter",
        Guarantee.AT_LEAST_ONCE,
        {"mode": "wal", "write": "increment"},
        "n counter",
        "Cassandra counter tables",
    ),
]


def _rows(seqs: Sequence[int]) -> pa.RecordBatch:
    return pa.record_batch(
        {"seq": pa.array(list(seqs), pa.int64()), "n": pa.array([1] * len(seqs), pa.int64())}
    )


@pytest.fixture(params=VARIANTS, ids=lambda v: v.name)
def sink_case(
    request: pytest.FixtureRequest,
    session: Any,
    cluster_address: tuple[str, int],
    tmp_path: Path,
) -> SinkCase:
    variant: Variant = request.param
    host, port = cluster_address
    table = f"conformance{next(_tables)}"
    session.execute(f"CREATE TABLE {table} (seq bigint PRIMARY KEY, {variant.columns})")
    checkpoint = tmp_path / "ck"
    checkpoint.mkdir()

    def read() -> list[int]:
        return [int(row.seq) for row in session.execute(f"SELECT seq FROM {table}")]

    def writes() -> Counter[int]:
        counted = write_counts(session, session.keyspace, table)
        return Counter(
            {int.from_bytes(key[0], "big", signed=True): n for key, n in counted.items()}
        )

    counts: Callable[[], Counter[int]] | None = None if os.environ.get(HOSTS_ENV) else writes

    return SinkCase(
        claims=variant.claims,
        connector=CassandraConnector,
        options={
            "contact.points": host,
            "port": str(port),
            "keyspace": session.keyspace,
            "table": table,
            "sink.id": f"conformance-{table}",
            "checkpointLocation": str(checkpoint),
            **variant.options,
        },
        schema=StructType([StructField("seq", LongType()), StructField("n", LongType())]),
        rows=_rows,
        read=read,
        writes=counts,
        readme=README,
        readme_row=variant.readme_row,
    )


class TestCassandraSinkConformance(SinkSuite):
    """Every case of :class:`~firesteel.testing.sink_suite.SinkSuite`, per sink."""
