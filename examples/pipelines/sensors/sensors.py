"""The example pipeline's streamlets: readings in, per-sensor metrics with keyed state, files out.

``readings`` reads JSON-lines sensor readings from a folder (parameter
``input-dir``) with firesteel's resettable file source; ``metrics`` keeps a
running count and mean per sensor in keyed state (filesystem backend, under
the pipeline's work folder); ``store`` writes the metrics to a folder
(parameter ``output-dir``) with firesteel's exactly-once file sink.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from firesteel.backends import FilesystemBackend
from firesteel.pipelines import (
    AvroCodec,
    Inlet,
    Outlet,
    Streamlet,
    StreamletContext,
    StreamletLogic,
    StreamletShape,
    StringParameter,
)
from firesteel.state import KeyedProcessor, KeyState, ValueStateDescriptor, stateful

READING = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "sensor", "type": "string"},
        {"name": "seq", "type": "long"},
        {"name": "value", "type": "double"},
    ],
}
METRIC = {
    "type": "record",
    "name": "Metric",
    "fields": [
        {"name": "sensor", "type": "string"},
        {"name": "seq", "type": "long"},
        {"name": "count", "type": "long"},
        {"name": "mean", "type": "double"},
    ],
}


class Readings(Streamlet):
    """Ingress: every JSON-lines file dropped into ``input-dir``."""

    shape = StreamletShape(outlets=[Outlet("out", AvroCodec(READING), key="sensor")])
    parameters = (StringParameter("input-dir", "folder of JSON-lines readings"),)
    description = "sensor readings from files"

    def create_logic(self, context: StreamletContext) -> StreamletLogic:
        return ReadingsLogic(context)


class ReadingsLogic(StreamletLogic):
    def run(self) -> Sequence[Any]:
        readings = (
            self.context.spark.readStream.format("firesteel.files")
            .schema("sensor string, seq long, value double")
            .option("format", "json")
            .load(str(Path(self.context.config["input-dir"]).resolve()))
        )
        return [self.context.write_stream(readings, "out")]


class RunningMean(KeyedProcessor):
    """Per sensor: how many readings so far and their mean; one metric per reading batch."""

    count = ValueStateDescriptor("count", int)
    total = ValueStateDescriptor("total", float)

    def process(self, key: Any, rows: Any, state: KeyState) -> Iterator[dict[str, Any]]:
        count = state.value(self.count)
        total = state.value(self.total)
        count.update((count.value() or 0) + rows.num_rows)
        total.update((total.value() or 0.0) + sum(rows.column("value").to_pylist()))
        last = max(rows.column("seq").to_pylist())
        yield {
            "sensor": key[0],
            "seq": last,
            "count": count.value(),
            "mean": total.value() / count.value(),
        }


class Metrics(Streamlet):
    """Processor with keyed state: a running count and mean per sensor."""

    shape = StreamletShape(
        inlets=[Inlet("in", AvroCodec(READING))],
        outlets=[Outlet("out", AvroCodec(METRIC), key="sensor")],
    )
    description = "running count and mean per sensor"

    def create_logic(self, context: StreamletContext) -> StreamletLogic:
        return MetricsLogic(context)


class MetricsLogic(StreamletLogic):
    def run(self) -> Sequence[Any]:
        state = self.context.checkpoint_location("out") + "-state"
        metrics = stateful(
            self.context.read_stream("in"),
            key="sensor",
            processor=RunningMean(),
            output_schema="sensor string, seq long, count long, mean double",
            backend=FilesystemBackend(f"file://{state}"),
            name="running-mean",
        )
        return [self.context.write_stream(metrics, "out")]


class Store(Streamlet):
    """Egress: metrics to Parquet files in ``output-dir``, exactly-once."""

    shape = StreamletShape(inlets=[Inlet("in", AvroCodec(METRIC))])
    parameters = (StringParameter("output-dir", "folder the metrics go to"),)
    description = "metrics to files"

    def create_logic(self, context: StreamletContext) -> StreamletLogic:
        return StoreLogic(context)


class StoreLogic(StreamletLogic):
    def run(self) -> Sequence[Any]:
        query = (
            self.context.read_stream("in")
            .writeStream.queryName(self.context.query_name())
            .format("firesteel.files")
            .option("path", str(Path(self.context.config["output-dir"]).resolve()))
            .option("guarantee", "exactly-once")
            .option("checkpointLocation", self.context.checkpoint_location())
            .trigger(**self.context.trigger)
            .start()
        )
        return [query]
