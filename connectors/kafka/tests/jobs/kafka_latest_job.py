"""Crash-test job: Kafka (default startingOffsets=latest) -> Kafka exactly-once, all available.

Usage: kafka_latest_job.py <bootstrap> <input topic> <output topic> <checkpoint>
"""

from __future__ import annotations

import sys

from firesteel.testing.jobs import job_session


def main() -> None:
    bootstrap, source, target, checkpoint = sys.argv[1:5]
    spark = job_session("kafka-latest-job", shuffle_partitions=2)
    records = (
        spark.readStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("checkpointLocation", checkpoint)
        .load()
    )
    writer = (
        records.select("key", "value")
        .writeStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("guarantee", "exactly-once")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
    )
    writer.start().awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
