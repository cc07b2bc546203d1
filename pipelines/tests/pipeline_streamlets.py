"""Streamlets the pipeline tests wire into blueprints (shapes only: no logic runs here)."""

from __future__ import annotations

from typing import Any

from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from firesteel.pipelines import (
    AvroCodec,
    BooleanParameter,
    DoubleParameter,
    DurationParameter,
    Inlet,
    IntegerParameter,
    JsonCodec,
    MemorySizeParameter,
    Outlet,
    Streamlet,
    StreamletLogic,
    StreamletShape,
    StringParameter,
)

READING_V1 = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "sensor", "type": "string"},
        {"name": "value", "type": "double"},
    ],
}
READING_V2 = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "sensor", "type": "string"},
        {"name": "value", "type": "double"},
        {"name": "unit", "type": "string", "default": "C"},
    ],
}
READING_NEEDS_UNIT = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "sensor", "type": "string"},
        {"name": "value", "type": "double"},
        {"name": "unit", "type": "string"},
    ],
}
METRIC = StructType(
    [
        StructField("sensor", StringType(), False),
        StructField("count", LongType(), False),
        StructField("mean", DoubleType(), True),
    ]
)

METRIC_NEEDS_UNIT = StructType([*METRIC.fields, StructField("unit", StringType(), False)])
READING_JSON = StructType(
    [StructField("sensor", StringType(), False), StructField("value", DoubleType(), False)]
)


class _NoLogic(Streamlet):
    def create_logic(self, context: Any) -> StreamletLogic:
        raise NotImplementedError


class Ingress(_NoLogic):
    shape = StreamletShape(outlets=[Outlet("out", AvroCodec(READING_V1), key="sensor")])
    parameters = (
        IntegerParameter("records-per-second", "how many readings to emit", default=10),
        StringParameter("sensor-prefix", "sensor names", default="s-", pattern=r"[a-z]+-"),
    )
    description = "emits sensor readings"


class IngressV2(_NoLogic):
    shape = StreamletShape(outlets=[Outlet("out", AvroCodec(READING_V2))])


class Metrics(_NoLogic):
    shape = StreamletShape(
        inlets=[Inlet("in", AvroCodec(READING_V1))],
        outlets=[Outlet("out", JsonCodec(METRIC))],
    )
    parameters = (
        DurationParameter("window", "window length", default="1 minute"),
        DoubleParameter("threshold", "alert above", default=0.5),
        BooleanParameter("alerts", "emit alerts", default=False),
        MemorySizeParameter("buffer", "buffer size", default="1M"),
        IntegerParameter("required-count", "no default"),
    )


class Relay(_NoLogic):
    """Reads readings and writes them on: two relays can make a cycle of topics."""

    shape = StreamletShape(
        inlets=[Inlet("in", AvroCodec(READING_V1))],
        outlets=[Outlet("out", AvroCodec(READING_V1))],
    )


class StrictMetrics(_NoLogic):
    shape = StreamletShape(inlets=[Inlet("in", AvroCodec(READING_NEEDS_UNIT))])


class Egress(_NoLogic):
    shape = StreamletShape(inlets=[Inlet("in", JsonCodec(METRIC))])


class StrictEgress(_NoLogic):
    shape = StreamletShape(inlets=[Inlet("in", JsonCodec(METRIC_NEEDS_UNIT))])


class JsonReadings(_NoLogic):
    """Reads the readings :class:`Ingress` writes, same fields, but as JSON text."""

    shape = StreamletShape(inlets=[Inlet("in", JsonCodec(READING_JSON, name="Reading"))])


class NotAStreamlet:
    pass
