"""Turning the columns of an Arrow batch into ``Producer.produce`` arguments.

Columns the sink understands (all optional except a value source):
``key`` (binary/string), ``value`` (binary/string), ``topic`` (string),
``partition`` (int), ``timestamp`` (timestamp or int ms), ``headers``
(array<struct<key string, value binary>> or map<string, binary>). With
``value.format`` json/avro the value is encoded from every other column.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from firesteel.core.spi import ConfigError, SinkError
from firesteel.kafka.codec import ValueEncoder, schema_text
from firesteel.kafka.options import KafkaSinkOptions

KAFKA_COLUMNS = frozenset({"key", "topic", "partition", "timestamp", "headers"})
UNASSIGNED = -1
"""librdkafka's RD_KAFKA_PARTITION_UA: let the partitioner choose."""


@dataclass
class ProduceArgs:
    """Per-row produce arguments of one batch, as parallel lists.

    ``timestamps`` and ``headers`` are ``None`` when the data has no such
    column: every row then takes librdkafka's defaults, and
    :attr:`positional` says the cheaper call form serves every row.
    """

    topics: list[str]
    keys: list[Any]
    values: list[Any]
    partitions: list[int]
    timestamps: list[int] | None = None
    headers: list[Any] | None = None

    def __len__(self) -> int:
        return len(self.values)

    @property
    def positional(self) -> bool:
        """Whether every row is ``produce(topic, value, key, partition)`` with nothing else."""
        return self.timestamps is None and self.headers is None

    def rows(self) -> Iterator[tuple[Any, ...]]:
        """Each row's ``(topic, value, key, partition)``, plus ``(timestamp, headers)``
        unless :attr:`positional`."""
        if self.positional:
            return zip(self.topics, self.values, self.keys, self.partitions, strict=True)
        rows = len(self)
        return zip(
            self.topics,
            self.values,
            self.keys,
            self.partitions,
            self.timestamps if self.timestamps is not None else [0] * rows,
            self.headers if self.headers is not None else [None] * rows,
            strict=True,
        )


def load_partitioner(spec: str) -> Callable[[bytes | None, int], int]:
    """Import ``module:function``; it is called as ``f(key, partition_count) -> partition``."""
    module_name, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        msg = f"option 'partitioner': cannot import {spec!r}: {exc}"
        raise ConfigError(msg) from exc


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    index = batch.schema.get_field_index(name)
    return None if index < 0 else batch.column(index)


def _timestamps(column: pa.Array | None) -> list[int] | None:
    if column is None:
        return None
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.timestamp("ms", tz=column.type.tz)).cast(pa.int64())
    return pc.fill_null(column.cast(pa.int64()), 0).to_pylist()


def _headers(column: pa.Array | None) -> list[Any] | None:
    if column is None:
        return None
    out: list[Any] = []
    for entry in column.to_pylist():
        if entry is None:
            out.append(None)
        elif isinstance(entry, list) and entry and isinstance(entry[0], dict):
            out.append([(h["key"], h["value"]) for h in entry])
        else:
            out.append(entry or None)
    return out


class RowExtractor:
    """Builds :class:`ProduceArgs` from batches; validates columns on first use."""

    def __init__(
        self,
        default_topic: str | None,
        encoder: ValueEncoder | None,
        partitioner: Callable[[bytes | None, int], int] | None = None,
        partition_count: Callable[[str], int] | None = None,
    ) -> None:
        self.default_topic = default_topic
        self.encoder = encoder
        self.partitioner = partitioner
        self.partition_count = partition_count

    def extract(self, batch: pa.RecordBatch) -> ProduceArgs:
        """The produce arguments of every row of ``batch``."""
        rows = batch.num_rows
        if self.encoder is not None:
            payload = [n for n in batch.schema.names if n not in KAFKA_COLUMNS]
            values = self.encoder.encode(batch.select(payload))
        else:
            value = _column(batch, "value")
            if value is None:
                msg = (
                    "firesteel.kafka sink: the data has no 'value' column; add one or set "
                    f"value.format to json/avro (columns: {', '.join(batch.schema.names)})"
                )
                raise SinkError(msg)
            values = value.to_pylist()
        keys_col = _column(batch, "key")
        keys = keys_col.to_pylist() if keys_col is not None else [None] * rows
        topic_col = _column(batch, "topic")
        if topic_col is None:
            if self.default_topic is None:
                msg = "firesteel.kafka sink: set option 'topic' or add a 'topic' column"
                raise SinkError(msg)
            topics = [self.default_topic] * rows
        else:
            topics = topic_col.to_pylist()
            if topic_col.null_count:
                if self.default_topic is None:
                    row = topics.index(None)
                    msg = f"firesteel.kafka sink: row {row} has a null topic and no option 'topic'"
                    raise SinkError(msg)
                topics = [t if t is not None else self.default_topic for t in topics]
        part_col = _column(batch, "partition")
        partitions = (
            pc.fill_null(part_col.cast(pa.int32()), UNASSIGNED).to_pylist()
            if part_col is not None
            else [UNASSIGNED] * rows
        )
        if self.partitioner is not None and self.partition_count is not None:
            partitions = [
                p
                if p != UNASSIGNED
                else self.partitioner(
                    k.encode() if isinstance(k, str) else k, self.partition_count(t)
                )
                for p, k, t in zip(partitions, keys, topics, strict=True)
            ]
        return ProduceArgs(
            topics,
            keys,
            values,
            partitions,
            _timestamps(_column(batch, "timestamp")),
            _headers(_column(batch, "headers")),
        )


def sink_extractor(options: KafkaSinkOptions, producer: Any) -> RowExtractor:
    """The :class:`RowExtractor` a sink with ``options`` uses, asking ``producer`` for
    partition counts (once per topic) when a custom partitioner needs them."""
    encoder = None
    if options.value_format != "binary":
        encoder = ValueEncoder(
            options.value_format,
            schema_text(options.value_schema, options.value_schema_file, "value.schema")
            if options.value_format == "avro"
            else None,
        )
    partitioner = load_partitioner(options.partitioner) if options.partitioner else None
    counts: dict[str, int] = {}

    def partition_count(topic: str) -> int:
        if topic not in counts:
            counts[topic] = len(producer.list_topics(topic, timeout=30).topics[topic].partitions)
        return counts[topic]

    return RowExtractor(options.topic, encoder, partitioner, partition_count)
