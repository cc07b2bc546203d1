"""What the Kafka crash-test job scripts share: their arguments, the input, the output.

A script is called as ``<script> <bootstrap> <input topic> <output topic> <checkpoint>
<its own argument> [<marker log topic>]`` and runs as :mod:`firesteel.testing.jobs`
says: from a fixed checkpoint, over the input available at start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from firesteel.testing.jobs import run_available

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class KafkaJob:
    """A Kafka -> Kafka job's command line."""

    bootstrap: str
    source: str
    target: str
    checkpoint: str
    argument: str
    """The script's own argument (a guarantee, a state location)."""
    marker_log: str = ""
    """tansu 0.6 only (Apache Kafka runs the default configuration): the marker log topic."""

    @classmethod
    def parse(cls, argv: Sequence[str]) -> KafkaJob:
        """The job of ``sys.argv[1:]``."""
        return cls(*argv[:6])

    def read(self, spark: SparkSession, max_offsets: int) -> DataFrame:
        """The input topic from its earliest offset, at most ``max_offsets`` offsets a batch
        (so a run has several batches to be killed in)."""
        return (
            spark.readStream.format("firesteel.kafka")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("subscribe", self.source)
            .option("startingOffsets", "earliest")
            .option("checkpointLocation", self.checkpoint)
            .option("maxOffsetsPerTrigger", str(max_offsets))
            .load()
        )

    def write(self, spark: SparkSession, frame: DataFrame, guarantee: str) -> None:
        """Write ``frame`` to the output topic with ``guarantee``, then stop ``spark``; with
        a marker log, read raw (tansu's ``read_committed`` shows aborted data)."""
        writer = (
            frame.writeStream.format("firesteel.kafka")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("topic", self.target)
            .option("guarantee", guarantee)
            .option("kafka.linger.ms", "5")
        )
        if self.marker_log:
            writer = writer.option("marker.log.topic", self.marker_log).option(
                "marker.log.reader", "raw"
            )
        run_available(spark, writer, self.checkpoint)
