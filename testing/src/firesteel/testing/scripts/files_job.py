"""Crash-test job: firesteel.files (or firesteel.kafka) source -> map -> firesteel.files sink.

Usage: files_job.py <input> <output> <checkpoint> <max per batch> [key=value ...]

Reads sequence-numbered Parquet files (``<input>`` a folder, ``<max per batch>``
files per batch) or JSON records ``{"seq": n, "text": ...}`` from a Kafka topic
(``<input>`` = ``kafka://<bootstrap>/<topic>``, ``<max per batch>`` records per
batch), derives two columns, and writes Parquet through the transactional file
sink with ``guarantee=exactly-once``, processing everything available
(Trigger.AvailableNow) from a fixed checkpoint. The output may be an
object-store URI (``s3a://bucket/out``); trailing ``key=value`` arguments are
session settings, e.g. ``spark.hadoop.fs.s3a.endpoint=...``.
"""

from __future__ import annotations

import sys

from pyspark.sql import functions as F

from firesteel.testing.jobs import (
    job_session,
    read_kafka_topic,
    read_parquet_files,
    write_files_exactly_once,
)

KAFKA = "kafka://"


def main() -> None:
    source, out, checkpoint, max_files = sys.argv[1:5]
    settings = dict(arg.split("=", 1) for arg in sys.argv[5:])
    spark = job_session("firesteel-files-crash", extra_config=settings)
    if source.startswith(KAFKA):
        bootstrap, topic = source.removeprefix(KAFKA).split("/", 1)
        records = (
            read_kafka_topic(spark, bootstrap, topic, checkpoint, max_files)
            .select(F.from_json(F.col("value").cast("string"), "seq long, text string").alias("r"))
            .select("r.*")
        )
    else:
        records = read_parquet_files(spark, source, max_files)
    mapped = records.select(
        "seq",
        (F.col("seq") * 3).alias("tripled"),
        F.upper(F.col("text")).alias("text"),
    )
    write_files_exactly_once(spark, mapped, out, checkpoint)


if __name__ == "__main__":
    main()
