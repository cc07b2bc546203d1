"""Crash-test job: Kafka -> map -> Kafka, all available input, from a fixed checkpoint.

Usage: map_job.py <bootstrap> <input topic> <output topic> <checkpoint> <guarantee>
<exactly-once mode> <partitions> <send>
Each input value ``<n>`` becomes ``out-<n>``; the key is kept. ``<exactly-once mode>`` is
the sink's ``exactly.once.mode`` (``write-ahead`` or ``in-task``; ignored by the other
guarantees); ``<partitions>`` other than 0 repartitions the records into that many
partitions (round robin) before the sink, as a user's ``repartition(n)`` does. ``<send>``
is ``driver`` or ``executors``: the job's driver then runs the Spark Connect server on a
free port and the write-ahead sink gets ``send.connect`` pointing at it
(:mod:`firesteel.sinks.fanout`).
"""

from __future__ import annotations

import sys

from firesteel.testing.jobs import (
    job_session,
    read_kafka_topic,
    sends_on_executors,
    write_kafka_topic,
)


def main() -> None:
    bootstrap, source, target, checkpoint, guarantee, mode, partitions, send = sys.argv[1:9]
    extra, connect = sends_on_executors() if send == "executors" else ({}, {})
    spark = job_session("kafka-map-job", shuffle_partitions=2, extra_config=extra)
    records = read_kafka_topic(spark, bootstrap, source, checkpoint, "60")
    mapped = records.selectExpr(
        "key", "CAST(concat('out-', CAST(value AS STRING)) AS BINARY) AS value"
    )
    if int(partitions):
        mapped = mapped.repartition(int(partitions))
    write_kafka_topic(
        spark,
        mapped,
        bootstrap,
        target,
        checkpoint,
        guarantee=guarantee,
        mode=mode,
        options={**connect, "kafka.linger.ms": "5"},
    )


if __name__ == "__main__":
    main()
