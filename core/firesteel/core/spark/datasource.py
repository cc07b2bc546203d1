"""The base of every firesteel connector's Spark ``DataSource``."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, ClassVar, TypeVar

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, DataSourceStreamWriter
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from firesteel.core.checkpoint import query_identity
from firesteel.core.errors import ConfigError
from firesteel.core.guarantee import Guarantee
from firesteel.core.options import option, parse_options
from firesteel.core.sink import Sink
from firesteel.core.source import ResettableSource
from firesteel.core.spark.reader import SparkStreamReader
from firesteel.core.spark.writer import SparkStreamWriter
from firesteel.core.storage import StorageConfig


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
        doc="stable id of this sink across restarts (default: derived from the output, or "
        "from the query for connectors without one)",
    )


def _digest(identity: str) -> str:
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def default_sink_id(
    options: dict[str, Any], output: str | None = None, *, new_stream: bool = False
) -> str:
    """The sink's id: ``sink.id`` if given, else one derived from the sink's ``output``.

    ``output`` names where the sink writes, spelled one way (a normalized path,
    a topic): the same job writing to the same output gets the same id whatever
    its checkpoint, so a job restarted on a deleted and recreated checkpoint
    finds the batches it committed before and the sink refuses to start
    (the file sink's owner record, the Kafka sink's commit markers, one small
    read each) instead of writing them all again. Batch ids restart at 0 in a
    new checkpoint, so neither skipping nor re-writing would be right; the
    user decides. ``new_stream`` (option ``sink.new.stream``) is that
    decision: the id is then derived from the output and Spark's query id
    (``<checkpoint>/metadata``, kept across restarts, new in a new checkpoint),
    a new sink that writes everything again and recognises its own restarts.

    Without ``output`` (connectors that have not chosen one) the id is derived
    from the query alone. An explicit ``sink.id`` is taken as is: the user then
    owns its lifetime (a new stream needs a new one).
    """
    explicit = options.get("sink.id")
    if explicit:
        if new_stream:
            msg = (
                f"options 'sink.id' ({explicit!r}) and 'sink.new.stream' exclude each other: "
                "a new stream with an explicit id is a new 'sink.id'"
            )
            raise ConfigError(msg)
        return str(explicit)
    query = query_identity(str(options.get("checkpointlocation", "")))
    if output is None:
        return _digest(query)
    if new_stream:
        return _digest(f"output:{output}|{query}")
    return _digest(f"output:{output}")


_Options = TypeVar("_Options")


class FiresteelDataSource(DataSource):
    """Registers as ``firesteel.<connector>``; subclasses build the source and the sink.

    The Spark adapters (offset tagging, guarantee check, votes) are shared; a
    connector only turns its options into a :class:`ResettableSource` and/or a
    :class:`Sink`.
    """

    connector: ClassVar[str]
    passthrough_prefixes: ClassVar[tuple[str, ...]] = ()
    """Option prefixes the connector hands to its client as they are (``kafka.*``)."""

    session_storage: ClassVar[StorageConfig] = StorageConfig()
    """The session's ``spark.hadoop.fs.*`` settings, as :func:`firesteel.register` saw them.

    Spark builds a Python data source in a worker process without a session,
    so :func:`~firesteel.core.registry.register` registers a subclass that
    carries them (a class Spark pickles by value)."""

    @classmethod
    def name(cls) -> str:
        return f"firesteel.{cls.connector}"

    def parsed_options(self, cls: type[_Options]) -> _Options:
        """These options as ``cls`` (:func:`~firesteel.core.options.parse_options`), keys
        under :attr:`passthrough_prefixes` collected, errors naming the connector."""
        return parse_options(
            cls,
            dict(self.options),
            passthrough_prefixes=self.passthrough_prefixes,
            connector=self.name(),
        )

    def storage_config(self) -> StorageConfig:
        """The store's settings: the ``fs.*`` options over the session's ``spark.hadoop.fs.*``."""
        return StorageConfig.of(dict(self.session_storage.settings), dict(self.options))

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
