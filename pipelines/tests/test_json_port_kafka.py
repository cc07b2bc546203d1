"""A JSON port with a timestamp field, read from a real Kafka broker as a pipeline reads it."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from firesteel.kafka.codec import ValueEncoder
from firesteel.pipelines import JsonCodec
from firesteel.pipelines.context import Port
from firesteel.pipelines.kafka import _value_options
from firesteel.testing.kafka import create_topic, produce

ORDER = StructType(
    [StructField("order", StringType(), False), StructField("placed", TimestampType(), True)]
)


def test_a_json_port_with_a_timestamp_field_is_read_from_kafka(
    spark: Any, bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(bootstrap, partitions=1)
    port = Port("in", topic, JsonCodec(ORDER), ORDER)
    placed = datetime.datetime(2026, 11, 28, 18, 0, 1, 500, tzinfo=datetime.UTC)
    rows = [{"order": "o-1", "placed": placed}, {"order": "o-2", "placed": None}]
    # The bytes a JSON outlet writes: the Kafka sink's own encoder.
    produce(bootstrap, topic, ValueEncoder("json").encode(pa.RecordBatch.from_pylist(rows)))
    reader = spark.readStream.format("firesteel.kafka")
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "checkpointLocation": str(tmp_path / "ck"),
        **_value_options(port, reading=True),
    }
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .select(*ORDER.fieldNames())
        .writeStream.format("memory")
        .queryName("json_orders")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    read = spark.sql("select order, placed from json_orders order by order").collect()
    assert [(r.order, r.placed) for r in read] == [
        ("o-1", placed.astimezone().replace(tzinfo=None)),
        ("o-2", None),
    ]
