"""Local topics: the embedded default runtime, needing no external service.

A local topic is a folder, ``<topics>/<topic name>/``. An outlet writes it with
firesteel's exactly-once file sink (Parquet, one ``sink.id`` per producing
outlet, so several producers share a topic); an inlet reads it with firesteel's
resettable file source, with the port's schema, never inferred. The sink
publishes a batch's files by renaming them into the folder after its manifest
commits, so a consumer only ever lists committed, complete files, and each
exactly once: between streamlets, as end to end, exactly-once.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from firesteel.pipelines.config import PipelineConfig
from firesteel.pipelines.errors import ConfigurationError
from firesteel.pipelines.ports import Inlet, Outlet
from firesteel.pipelines.schemas import spark_schema
from firesteel.pipelines.verify import VerifiedBlueprint


@dataclass(frozen=True)
class LocalPort:
    """Where one port's local topic lives, and its records' Spark schema."""

    topic: str
    path: Path
    schema: Any


class LocalContext:
    """A :class:`~firesteel.pipelines.streamlet.StreamletContext` over local topics."""

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
        cls = verified.streamlets[streamlet]
        self.ports: dict[str, LocalPort] = {}
        ports: list[Inlet | Outlet] = [*cls.shape.inlets, *cls.shape.outlets]
        for port in ports:
            key = verified.topic_of(streamlet, port.name)
            if key is None:
                continue
            name = verified.blueprint.topics[key].name
            schema = spark_schema(port.codec.avro_schema())
            self.ports[port.name] = LocalPort(name, topic_path(work, name), schema)

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

    def checkpoint_location(self, outlet: str) -> str:
        """``<work>/checkpoints/<streamlet>/<outlet>``; a new temporary folder when checkpointing
        is off (so a restart starts over)."""
        if not self.checkpointing.enabled:
            return tempfile.mkdtemp(prefix=f"firesteel-{self._streamlet}-{outlet}-")
        return str(self.work / "checkpoints" / self._streamlet / outlet)

    def _port(self, name: str, kind: str) -> LocalPort:
        port = self.ports.get(name)
        if port is None:
            msg = f"streamlet {self._streamlet!r} has no connected {kind} {name!r}"
            raise ConfigurationError(msg)
        return port

    def read_stream(self, inlet: str) -> Any:
        """The committed records of ``inlet``'s topic, as a streaming DataFrame."""
        port = self._port(inlet, "inlet")
        port.path.mkdir(parents=True, exist_ok=True)
        return (
            self._spark.readStream.format("firesteel.files")
            .schema(port.schema)
            .option("format", "parquet")
            .load(str(port.path))
        )

    def write_stream(self, df: Any, outlet: str, **options: str) -> Any:
        """Start writing ``df`` (its columns as the outlet's schema names them) exactly-once."""
        port = self._port(outlet, "outlet")
        missing = [f.name for f in port.schema.fields if f.name not in df.columns]
        if missing:
            msg = (
                f"streamlet {self._streamlet!r}: outlet {outlet!r} needs columns {missing}; "
                f"the DataFrame has {df.columns}"
            )
            raise ConfigurationError(msg)
        columns = [df[f.name].cast(f.dataType).alias(f.name) for f in port.schema.fields]
        writer = (
            df.select(*columns)
            .writeStream.format("firesteel.files")
            .queryName(f"{self.blueprint}.{self._streamlet}.{outlet}")
            .option("path", str(port.path))
            .option("format", "parquet")
            .option("sink.id", f"{self._streamlet}.{outlet}")
            .option("checkpointLocation", self.checkpoint_location(outlet))
        )
        if self.checkpointing.enabled:
            writer = writer.option("guarantee", self.checkpointing.guarantee)
        for key, value in options.items():
            writer = writer.option(key, value)
        return writer.trigger(**self.trigger).start()


def topic_path(work: Path, topic: str) -> Path:
    """The folder of local topic ``topic`` under the pipeline's work folder."""
    return work / "topics" / topic
