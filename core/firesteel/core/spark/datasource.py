"""The base of every firesteel connector's Spark ``DataSource``."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, ClassVar

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, DataSourceStreamWriter
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from firesteel.core.checkpoint import normalize_location, read_query_id
from firesteel.core.errors import ConfigError
from firesteel.core.guarantee import Guarantee
from firesteel.core.options import option
from firesteel.core.sink import Sink
from firesteel.core.source import ResettableSource
from firesteel.core.spark.reader import SparkStreamReader
from firesteel.core.spark.writer import SparkStreamWriter


@dataclasses.dataclass(frozen=True)
class SinkOptions:
    """Options every firesteel sink accepts; connectors' option dataclasses inherit them.

    Subclass with ``@dataclasses.dataclass(frozen=True, kw_only=True)`` so a
    connector's required options may follow these defaulted ones.
    """

    guarantee: Guarantee | None = option(
        None,
        doc="refuse to start unless the query delivers this: exactly-once, at-least-once",
    )
    sink_id: str | None = option(
        None,
        name="sink.id",
        doc="stable id of this sink across restarts (default: derived from the checkpoint path)",
    )


def default_sink_id(options: dict[str, Any]) -> str:
    """The sink's id: ``sink.id`` if given, else one derived from Spark's query id.

    Spark gives every checkpoint a query id (``<checkpoint>/metadata``) that stays
    the same across restarts and is new when a checkpoint is deleted and created
    again. Deriving the id from it, never from the spelling of the path, means
    ``/chk``, ``/chk/`` and ``file:///chk`` are one sink, and reprocessing into a
    recreated checkpoint starts a new sink instead of skipping the batches an
    earlier query committed. An explicit ``sink.id`` is taken as is: the user
    then owns its lifetime (a recreated checkpoint must get a new one). The
    file sink records which query owns an id in its output folder and refuses
    another query using it; the Kafka sink cannot (see its README).
    """
    explicit = options.get("sink.id")
    if explicit:
        return str(explicit)
    checkpoint = str(options.get("checkpointlocation", ""))
    query_id = read_query_id(checkpoint) if checkpoint else None
    identity = f"query:{query_id}" if query_id else normalize_location(checkpoint)
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


class FiresteelDataSource(DataSource):
    """Registers as ``firesteel.<connector>``; subclasses build the source and the sink.

    The Spark adapters (offset tagging, guarantee check, votes) are shared; a
    connector only turns its options into a :class:`ResettableSource` and/or a
    :class:`Sink`.
    """

    connector: ClassVar[str]

    @classmethod
    def name(cls) -> str:
        return f"firesteel.{cls.connector}"

    def create_source(self, schema: StructType | None) -> ResettableSource:
        """The source for these options (``schema`` is the user's, if given)."""
        msg = f"{self.name()} cannot be used with readStream"
        raise ConfigError(msg)

    def create_sink(self, schema: StructType) -> tuple[Sink, Guarantee | None]:
        """The sink for these options and the guarantee it was asked for."""
        msg = f"{self.name()} cannot be used with writeStream"
        raise ConfigError(msg)

    def schema(self) -> StructType:
        return from_arrow_schema(self.create_source(None).schema())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return SparkStreamReader(self.create_source(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        sink, required = self.create_sink(schema)
        return SparkStreamWriter(sink, dict(self.options), required)
