"""Crash-test job: Kafka -> map -> Kafka, all available input, from a fixed checkpoint.

Usage: map_job.py <bootstrap> <input topic> <output topic> <checkpoint> <guarantee>
[<marker log topic>]
Each input value ``<n>`` becomes ``out-<n>``; the key and partition are kept.
"""

from __future__ import annotations

import sys

from firesteel.testing.jobs import job_session
from firesteel.testing.kafka.jobs import KafkaJob


def main() -> None:
    job = KafkaJob.parse(sys.argv[1:])
    spark = job_session("kafka-map-job", shuffle_partitions=2)
    mapped = job.read(spark, max_offsets=60).selectExpr(
        "key", "CAST(concat('out-', CAST(value AS STRING)) AS BINARY) AS value"
    )
    job.write(spark, mapped, guarantee=job.argument)


if __name__ == "__main__":
    main()
