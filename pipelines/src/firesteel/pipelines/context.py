"""What every runtime's streamlet context shares: session, configuration, ports, checkpoints.

A runtime (local topics, Kafka) subclasses :class:`PortContext` and says how
an inlet is read and an outlet written; everything else is decided here once.

Queries and checkpoints: a streamlet's queries are named, and each name has
its own checkpoint folder, ``<work>/checkpoints/<streamlet>/<query>``. The
query writing an outlet is named after the outlet. A source that keeps
records in its query's checkpoint (the Kafka source pins its start there)
must be told which query reads it: :meth:`PortContext.read_stream` takes
``query``, by default the streamlet's *main query*, named after its only
outlet, or ``main`` when it has none or several. An egress writing elsewhere
uses :meth:`PortContext.checkpoint_location` with no name, and so shares that
default with its inlets.
"""

from __future__ import annotations

import tempfile
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from firesteel.pipelines.config import PipelineConfig
from firesteel.pipelines.errors import ConfigurationError
from firesteel.pipelines.ports import Codec, Outlet, StreamletPort
from firesteel.pipelines.schemas import spark_schema
from firesteel.pipelines.verify import VerifiedBlueprint

MAIN_QUERY = "main"
"""The default query name of a streamlet without exactly one outlet."""


@dataclass(frozen=True)
class Port:
    """One connected port: its topic, codec, Spark schema, and for an outlet its record key
    and partitioner (``module:function``)."""

    name: str
    topic: str
    codec: Codec
    schema: Any
    key: str | None = None
    partitioner: str | None = None


class PortContext(ABC):
    """A :class:`~firesteel.pipelines.streamlet.StreamletContext` minus the topic transport."""

    def __init__(
        self,
        spark: Any,
        verified: VerifiedBlueprint,
        config: PipelineConfig,
        streamlet: str,
        work: Path,
        *,
        trigger: Mapping[str, Any] | None = None,
    ) -> None:
        self._spark = spark
        self._verified = verified
        self._streamlet = streamlet
        self.work = work
        resolved = config.streamlet(streamlet)
        self._config = resolved.parameters
        self.checkpointing = resolved.checkpointing
        self.trigger = dict(trigger or self.checkpointing.trigger)
        self._temporary: dict[str, str] = {}
        cls = verified.streamlets[streamlet]
        outlets = list(cls.shape.outlets)
        self.main_query = outlets[0].name if len(outlets) == 1 else MAIN_QUERY
        self.ports: dict[str, Port] = {}
        ports: list[StreamletPort] = [*cls.shape.inlets, *outlets]
        for port in ports:
            key = verified.topic_of(streamlet, port.name)
            if key is None:
                continue
            self.ports[port.name] = Port(
                port.name,
                verified.blueprint.topics[key].name,
                port.codec,
                spark_schema(port.codec.avro_schema()),
                port.key if isinstance(port, Outlet) else None,
                port.partitioner_reference if isinstance(port, Outlet) else None,
            )
        self._prepare(config)

    def _prepare(self, config: PipelineConfig) -> None:
        """The transport's own set-up and checks, once the ports are known (local topics
        need none)."""

    @property
    def spark(self) -> Any:
        """The streamlet's SparkSession."""
        return self._spark

    @property
    def blueprint(self) -> str:
        """The pipeline's name."""
        return self._verified.blueprint.name

    @property
    def streamlet(self) -> str:
        """This streamlet's name."""
        return self._streamlet

    @property
    def config(self) -> Mapping[str, Any]:
        """This streamlet's parameter values."""
        return self._config

    def checkpoint_location(self, query: str | None = None) -> str:
        """``<work>/checkpoints/<streamlet>/<query>`` (default: the main query, module docs);
        with checkpointing off, a temporary folder per query and run, so a restart starts over."""
        name = query or self.main_query
        if not self.checkpointing.enabled:
            if name not in self._temporary:
                prefix = f"firesteel-{self._streamlet}-{name}-"
                self._temporary[name] = tempfile.mkdtemp(prefix=prefix)
            return self._temporary[name]
        return str(self.work / "checkpoints" / self._streamlet / name)

    def query_name(self, query: str | None = None) -> str:
        """``<pipeline>.<streamlet>.<query>`` (default: the main query): the name of query
        ``query`` in Spark (its UI, its progress, its log lines)."""
        return f"{self.blueprint}.{self._streamlet}.{query or self.main_query}"

    def port(self, name: str, kind: str) -> Port:
        """The connected inlet or outlet ``name`` (``kind`` names which, for the error)."""
        port = self.ports.get(name)
        if port is None:
            msg = f"streamlet {self._streamlet!r} has no connected {kind} {name!r}"
            raise ConfigurationError(msg)
        return port

    def outlet_columns(self, df: Any, port: Port) -> list[Any]:
        """``df``'s columns as the outlet's schema names and types them, in its order."""
        missing = [f.name for f in port.schema.fields if f.name not in df.columns]
        if missing:
            msg = (
                f"streamlet {self._streamlet!r}: outlet {port.name!r} needs columns {missing}; "
                f"the DataFrame has {df.columns}"
            )
            raise ConfigurationError(msg)
        return [df[f.name].cast(f.dataType).alias(f.name) for f in port.schema.fields]

    def start(self, writer: Any, outlet: str, options: Mapping[str, str]) -> Any:
        """Name ``writer``'s query, give it the outlet's checkpoint and guarantee, and start it."""
        writer = writer.queryName(self.query_name(outlet)).option(
            "checkpointLocation", self.checkpoint_location(outlet)
        )
        if self.checkpointing.enabled:
            writer = writer.option("guarantee", self.checkpointing.guarantee)
        for key, value in options.items():
            writer = writer.option(key, value)
        return writer.trigger(**self.trigger).start()

    @abstractmethod
    def read_stream(self, inlet: str, query: str | None = None) -> Any:
        """The committed records of ``inlet``'s topic, as a streaming DataFrame read by
        ``query`` (default: the main query, module docs)."""

    @abstractmethod
    def write_stream(self, df: Any, outlet: str, **options: str) -> Any:
        """Start writing ``df`` (its columns as the outlet's schema names them) exactly-once."""
