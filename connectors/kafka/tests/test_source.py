"""The Kafka source against a real broker and real Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import needs_real_kafka

from firesteel.kafka.testing import create_topic, produce


def _read_all(spark, bootstrap, tmp_path: Path, **options: str) -> list:
    reader = spark.readStream.format("firesteel.kafka").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .writeStream.format("memory")
        .queryName(f"q{abs(hash(str(tmp_path))) % 10**8}")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    rows = spark.sql(f"select * from {query.name}").collect()
    return rows


def test_reads_every_record_once_with_schema(spark, bootstrap, tmp_path):
    topic = create_topic(bootstrap, partitions=3)
    values = [f"v{i}".encode() for i in range(300)]
    produce(bootstrap, topic, values, headers=[("h", b"x")])
    rows = _read_all(spark, bootstrap, tmp_path, subscribe=topic, startingOffsets="earliest")
    assert sorted(r.value for r in rows) == sorted(values)
    row = rows[0]
    assert set(row.asDict()) == {
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"
    }
    assert row.topic == topic and row.headers[0].key == "h" and row.headers[0].value == b"x"
    by_partition: dict[int, list[int]] = {}
    for r in rows:
        by_partition.setdefault(r.partition, []).append(r.offset)
    for offsets in by_partition.values():
        assert sorted(offsets) == list(range(len(offsets)))
