"""Crash-test job: Kafka -> map -> Kafka, all available input, from a fixed checkpoint.

Usage: map_job.py <bootstrap> <input topic> <output topic> <checkpoint> <guarantee>
[<marker log topic>]
Each input value ``<n>`` becomes ``out-<n>``; the key and partition are kept.
"""

from __future__ import annotations

import sys

from firesteel.testing.jobs import job_session


def main() -> None:
    bootstrap, source, target, checkpoint, guarantee = sys.argv[1:6]
    marker_log = sys.argv[6] if len(sys.argv) > 6 else ""
    spark = job_session("kafka-map-job", shuffle_partitions=2)
    records = (
        spark.readStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("checkpointLocation", checkpoint)
        .option("maxOffsetsPerTrigger", "60")
        .load()
    )
    mapped = records.selectExpr(
        "key", "CAST(concat('out-', CAST(value AS STRING)) AS BINARY) AS value"
    )
    writer = (
        mapped.writeStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("guarantee", guarantee)
        .option("kafka.linger.ms", "5")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
    )
    if marker_log:
        writer = writer.option("marker.log.topic", marker_log).option("marker.log.reader", "raw")
    query = writer.start()
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
