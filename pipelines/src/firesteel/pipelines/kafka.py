"""Kafka topics between streamlets: exactly-once over a real cluster.

Chosen when the configuration names a cluster (``firesteel.kafka {
bootstrap.servers = "host:9092" }``; every other key there is a librdkafka
property given to both the source and the sink). Each outlet writes through
firesteel's exactly-once Kafka sink (``guarantee`` from the streamlet's
checkpointing mode, ``transaction.timeout.ms`` from its checkpointing
timeout, so broker transactions stay as short as a batch), keyed by the
outlet's ``key`` column so that one key's records stay in one partition and
in order, or spread by the outlet's ``partitioner``
(:mod:`firesteel.pipelines.partitioners`, the sink's ``partitioner`` option);
each inlet reads committed records only (the source's
``read_committed`` isolation) through the resettable Kafka source, from the
topic's beginning on a query's first run, then from its checkpoint. So a
batch is either in the downstream streamlet's input whole, once, or not at
all: exactly-once between streamlets as end to end.

Records are Avro binary (``AvroCodec``) or JSON text (``JsonCodec``) values
of the port's schema, without Schema Registry framing. The Kafka source puts
its own columns (``key``, ``topic``, ``partition``, ``offset``,
``timestamp``, ``timestampType``) beside the decoded fields, so a port whose
record has a field of one of those names is refused.

Topics are created before the streamlets start (:func:`create_topics`), with
the blueprint's ``partitions``, else the largest ``parallelism`` of the
streamlets producing or consuming it, else :data:`DEFAULT_PARTITIONS`, and the
broker's default replication; existing topics are left as they are.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from firesteel.pipelines.config import PipelineConfig
from firesteel.pipelines.context import Port, PortContext
from firesteel.pipelines.errors import ConfigurationError
from firesteel.pipelines.verify import VerifiedBlueprint

logger = logging.getLogger(__name__)

DEFAULT_PARTITIONS = 3
"""Partitions of a topic whose blueprint entry gives none."""

SOURCE_COLUMNS = frozenset({"key", "topic", "partition", "offset", "timestamp", "timestampType"})
"""The Kafka source's own columns, which a port's record fields may not shadow."""

ADMIN_TIMEOUT_S = 15.0


def _value_options(port: Port, *, reading: bool) -> dict[str, str]:
    """How the port's records are encoded; the JSON writer needs no schema, its reader does."""
    if port.codec.format == "avro":
        return {"value.format": "avro", "value.schema": json.dumps(port.codec.avro_schema())}
    return {"value.format": "json", **({"value.schema": port.schema.json()} if reading else {})}


class KafkaContext(PortContext):
    """A :class:`~firesteel.pipelines.streamlet.StreamletContext` over Kafka topics."""

    def _prepare(self, config: PipelineConfig) -> None:
        """The cluster's properties; a port whose fields the source's columns would shadow
        is refused."""
        self.properties = {f"kafka.{k}": v for k, v in config.kafka_properties().items()}
        for port in self.ports.values():
            shadowed = sorted(SOURCE_COLUMNS & set(port.schema.fieldNames()))
            if shadowed:
                msg = (
                    f"streamlet {self._streamlet!r}: port {port.name!r} (topic {port.topic!r}) has "
                    f"fields {shadowed}, which the Kafka source uses for its own columns: "
                    "rename them in the port's schema"
                )
                raise ConfigurationError(msg)

    def read_stream(self, inlet: str, query: str | None = None) -> Any:
        """The committed records of ``inlet``'s topic, decoded, as a streaming DataFrame read
        by ``query`` (the Kafka source keeps its start in that query's checkpoint)."""
        port = self.port(inlet, "inlet")
        reader = self.spark.readStream.format("firesteel.kafka")
        options = {
            **self.properties,
            **_value_options(port, reading=True),
            "subscribe": port.topic,
            "startingOffsets": "earliest",
            "checkpointLocation": self.checkpoint_location(query),
        }
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load().select(*port.schema.fieldNames())

    def write_stream(self, df: Any, outlet: str, **options: str) -> Any:
        """Start writing ``df`` (its columns as the outlet's schema names them) to the outlet's
        topic, exactly-once, keyed by the outlet's ``key`` column."""
        port = self.port(outlet, "outlet")
        columns = self.outlet_columns(df, port)
        if port.key is not None:
            columns.append(df[port.key].cast("string").alias("key"))
        timeout_ms = int(self.checkpointing.timeout.total_seconds() * 1000)
        writer = df.select(*columns).writeStream.format("firesteel.kafka")
        settings = {
            **self.properties,
            **_value_options(port, reading=False),
            "topic": port.topic,
            "sink.id": f"{self.blueprint}.{self.streamlet}.{outlet}",
            "kafka.transaction.timeout.ms": str(timeout_ms),
        }
        if port.partitioner is not None:
            settings["partitioner"] = port.partitioner
        for key, value in settings.items():
            writer = writer.option(key, value)
        return self.start(writer, outlet, options)


def create_topics(verified: VerifiedBlueprint, config: PipelineConfig) -> None:
    """Create the blueprint's topics that do not exist yet on ``config``'s Kafka cluster."""
    try:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        from firesteel.kafka.errors import UnreachableError
        from firesteel.kafka.first_contact import first_contact
    except ImportError:
        msg = "Kafka topics between streamlets need: pip install 'firesteel-pipelines[kafka]'"
        raise ConfigurationError(msg) from None

    properties: dict[str, str | int | float | bool] = dict(config.kafka_properties())
    servers = properties.get("bootstrap.servers", "")
    admin = AdminClient(properties)
    try:
        existing = set(first_contact(admin, properties, "pipeline topics").topics)
    except UnreachableError as exc:
        msg = f"{exc} (set in the configuration as firesteel.kafka.bootstrap.servers)"
        raise ConfigurationError(msg) from exc
    wanted = [
        NewTopic(binding.name, topic_partitions(verified, config, key))
        for key, binding in verified.blueprint.topics.items()
        if binding.name not in existing
    ]
    if not wanted:
        return
    for name, future in admin.create_topics(wanted, request_timeout=ADMIN_TIMEOUT_S).items():
        try:
            future.result()
            logger.info("created topic %s on %s", name, servers)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                msg = f"cannot create topic {name!r} on {servers!r}: {error.str()}"
                raise ConfigurationError(msg) from None


def topic_partitions(verified: VerifiedBlueprint, config: PipelineConfig, topic: str) -> int:
    """The partitions blueprint topic ``topic`` is created with (module docs)."""
    binding = verified.blueprint.topics[topic]
    if binding.partitions:
        return binding.partitions
    ends = [*binding.producers, *binding.consumers]
    given = [config.streamlet(end.split(".")[0]).parallelism for end in ends]
    return max((p for p in given if p is not None), default=DEFAULT_PARTITIONS)
