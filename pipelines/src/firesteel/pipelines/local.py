"""Local topics: the embedded default runtime, needing no external service.

A local topic is a folder, ``<topics>/<topic name>/``. An outlet writes it with
firesteel's exactly-once file sink (Parquet, one ``sink.id`` per producing
outlet, so several producers share a topic); an inlet reads it with firesteel's
resettable file source, with the port's schema, never inferred. The sink
publishes a batch's files into the folder only after its manifest commits, so
a consumer only ever lists committed, complete files, and each exactly once:
between streamlets, as end to end, exactly-once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from firesteel.pipelines.context import PortContext


class LocalContext(PortContext):
    """A :class:`~firesteel.pipelines.streamlet.StreamletContext` over local topics."""

    def topic_path(self, port: str) -> Path:
        """The folder of the local topic that port ``port`` is connected to."""
        return topic_path(self.work, self.port(port, "port").topic)

    def read_stream(self, inlet: str, query: str | None = None) -> Any:
        """The committed records of ``inlet``'s topic, as a streaming DataFrame (the file
        source keeps nothing in its query's checkpoint, so ``query`` changes nothing here)."""
        port = self.port(inlet, "inlet")
        path = topic_path(self.work, port.topic)
        path.mkdir(parents=True, exist_ok=True)
        return (
            self.spark.readStream.format("firesteel.files")
            .schema(port.schema)
            .option("format", "parquet")
            .load(str(path))
        )

    def write_stream(self, df: Any, outlet: str, **options: str) -> Any:
        """Start writing ``df`` (its columns as the outlet's schema names them) exactly-once."""
        port = self.port(outlet, "outlet")
        writer = (
            df.select(*self.outlet_columns(df, port))
            .writeStream.format("firesteel.files")
            .option("path", str(topic_path(self.work, port.topic)))
            .option("format", "parquet")
            .option("sink.id", f"{self.streamlet}.{outlet}")
        )
        return self.start(writer, outlet, options)


def topic_path(work: Path, topic: str) -> Path:
    """The folder of local topic ``topic`` under the pipeline's work folder."""
    return work / "topics" / topic
