"""``firesteel.kafka``: the Spark data source that builds the Kafka source and sinks."""

from __future__ import annotations

from typing import ClassVar

from pyspark.sql.types import StructType

from firesteel.core.spi import (
    FiresteelDataSource,
    Guarantee,
    ResettableSource,
    Sink,
    default_sink_id,
)
from firesteel.kafka.options import (
    PASSTHROUGH,
    KafkaSinkOptions,
    KafkaSourceOptions,
)
from firesteel.kafka.sink import KafkaExactlyOnceSink, KafkaSink, KafkaWriteAheadSink
from firesteel.kafka.sink.partition_count import PartitionLayout
from firesteel.kafka.source import KafkaSource


class KafkaConnector(FiresteelDataSource):
    """Registered as ``firesteel.kafka`` by :func:`firesteel.core.register`."""

    connector: ClassVar[str] = "kafka"
    passthrough_prefixes: ClassVar[tuple[str, ...]] = PASSTHROUGH

    def create_source(self, schema: StructType | None) -> ResettableSource:
        return KafkaSource(self.parsed_options(KafkaSourceOptions))

    def create_sink(self, schema: StructType) -> tuple[Sink, Guarantee | None]:
        options = self.parsed_options(KafkaSinkOptions)
        # The output: where the rows go and where the commit markers live.
        output = f"kafka:{options.topic or ''}/{options.marker_topic or options.topic or ''}"
        sink_id = default_sink_id(dict(self.options), output, new_stream=options.sink_new_stream)
        checkpoint = str(dict(self.options).get("checkpointlocation", ""))
        if options.delivery is not Guarantee.EXACTLY_ONCE:
            return KafkaSink(options, sink_id, checkpoint), options.guarantee
        if options.exactly_once_mode == "write-ahead":
            return KafkaWriteAheadSink(options, sink_id, checkpoint), Guarantee.EXACTLY_ONCE
        layout = PartitionLayout(checkpoint, sink_id) if checkpoint else None
        sink = KafkaExactlyOnceSink(options, sink_id, layout, checkpoint)
        return sink, Guarantee.EXACTLY_ONCE
