"""Crash-test job: Kafka -> map -> Kafka, all available input, from a fixed checkpoint.

Usage: kafka_map_job.py <bootstrap> <input topic> <output topic> <checkpoint> <guarantee>
Each input value ``<n>`` becomes ``out-<n>``; the key and partition are kept.
"""

from __future__ import annotations

import sys

from firesteel.testing.jobs import job_session


def main() -> None:
    bootstrap, source, target, checkpoint, guarantee = sys.argv[1:6]
    spark = job_session("kafka-map-job", shuffle_partitions=2)
    records = (
        spark.readStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "80")
        .load()
    )
    mapped = records.selectExpr(
        "key", "CAST(concat('out-', CAST(value AS STRING)) AS BINARY) AS value"
    )
    query = (
        mapped.writeStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("guarantee", guarantee)
        .option("kafka.linger.ms", "5")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
