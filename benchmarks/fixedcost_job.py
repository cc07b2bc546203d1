"""One job of the ``fixedcost`` group: 1-row micro-batches, one at a time, timed by Spark.

``python -m benchmarks.fixedcost_job WORKLOAD --work DIR [--bootstrap B] [--batches N]
[--conf KEY=VALUE ...]`` from the repository root (or :func:`run_batches` in a running
session). Workloads:

- ``kafka``: Kafka -> Kafka, ``firesteel.kafka`` source and exactly-once sink in its
  default mode (``write-ahead``); ``kafka-in-task``: the same in ``exactly.once.mode=in-task``;
  ``kafka-at-least-once``: the same sink without a guarantee asked (at-least-once);
- ``files``: ``firesteel.files`` source (Parquet) -> ``firesteel.files`` sink, exactly-once;
  ``spark-files``: the same with Spark's own Parquet source and file sink;
- ``keyed``: Kafka -> keyed running count (:func:`firesteel.state.stateful`, heap backend)
  -> Kafka exactly-once.

The job feeds one record (or one one-row file), waits for the batch that reads it to
commit, and feeds the next, so each batch has exactly one row and the next trigger
finds it waiting. It prints, as JSON lines, ``{"event": "ready"}`` once its session is
up and one ``{"event": "batch", ...}`` per batch with Spark's own progress
(``durationMs``, ``timestamp``), then ``{"event": "done"}``. Started with
``FIRESTEEL_LOG_LEVEL=DEBUG``, firesteel's timing records
(:func:`firesteel.core.logs.timed`) go to stderr, where the group reads them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.keyed import KeyedCount
from firesteel.core import LOCAL_PROFILE, local_session
from firesteel.testing.workerpython import use_worker_python

PARTITIONS = 4
BATCH_TIMEOUT_S = 300.0
WORKLOADS = ("kafka", "kafka-in-task", "kafka-at-least-once", "files", "spark-files", "keyed")


def _kafka_frame(spark: Any, args: argparse.Namespace, source: str, work: Path) -> Any:
    return (
        spark.readStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "false")
        .option("checkpointLocation", str(work / "checkpoint"))
        .load()
    )


def _kafka_sink(frame: Any, args: argparse.Namespace, target: str) -> Any:
    writer = (
        frame.writeStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", target)
        .option("kafka.linger.ms", "5")
    )
    if args.workload == "kafka-in-task":
        writer = writer.option("exactly.once.mode", "in-task")
    if args.workload != "kafka-at-least-once":
        writer = writer.option("guarantee", "exactly-once")
    return writer


def _build(spark: Any, args: argparse.Namespace, work: Path) -> tuple[Any, Any]:
    """The writer, not started, and the function that feeds one row."""
    if args.workload in ("files", "spark-files"):
        inbox = work / "input"
        inbox.mkdir()
        count = iter(range(1 << 30))

        def feed_file() -> None:
            index = next(count)
            table = pa.table({"seq": pa.array([index], pa.int64())})
            pq.write_table(table, inbox / f".part-{index:06d}.parquet")
            # Renamed into place whole: the source never lists a half-written file.
            (inbox / f".part-{index:06d}.parquet").rename(inbox / f"part-{index:06d}.parquet")

        if args.workload == "spark-files":
            writer = (
                spark.readStream.schema("seq long")
                .parquet(str(inbox))
                .writeStream.format("parquet")
                .option("path", str(work / "out"))
            )
            return writer, feed_file
        writer = (
            spark.readStream.format("firesteel.files")
            .option("format", "parquet")
            .option("log.path", str(work / "source-log"))
            .schema("seq long")
            .load(str(inbox))
            .writeStream.format("firesteel.files")
            .option("format", "parquet")
            .option("path", str(work / "out"))
            .option("guarantee", "exactly-once")
        )
        return writer, feed_file
    from confluent_kafka import Producer

    from firesteel.testing.kafka import create_topic

    source = create_topic(args.bootstrap, PARTITIONS)
    target = create_topic(args.bootstrap, PARTITIONS)
    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 0, "acks": "all"})
    sent = iter(range(1 << 30))

    def feed_record() -> None:
        index = next(sent)
        producer.produce(source, b"%08d" % index, b"k%d" % (index % 10), partition=0)
        if producer.flush(30):
            msg = f"fixedcost_job: could not produce to {source}"
            raise RuntimeError(msg)

    frame = _kafka_frame(spark, args, source, work)
    if args.workload == "keyed":
        from firesteel.backends import HeapBackend
        from firesteel.state import stateful

        counted = stateful(
            frame.selectExpr("cast(key as string) as key"),
            key="key",
            processor=KeyedCount(),
            output_schema="key string, count long",
            backend=HeapBackend(str(work / "keyed-state")),
            name="count",
        )
        frame = counted.selectExpr(
            "cast(key as binary) as key", "cast(cast(count as string) as binary) as value"
        )
    else:
        frame = frame.select("key", "value")
    return _kafka_sink(frame, args, target), feed_record


def _await_batch(query: Any, seen: int) -> dict[str, Any]:
    """The progress of the first batch after batch ``seen`` that read a row."""
    deadline = time.monotonic() + BATCH_TIMEOUT_S
    while time.monotonic() < deadline:
        if query.exception() is not None:
            msg = f"fixedcost_job: the query failed: {query.exception()}"
            raise RuntimeError(msg)
        for progress in query.recentProgress:
            if progress["batchId"] > seen and progress["numInputRows"] > 0:
                return dict(progress)
        time.sleep(0.02)
    msg = f"fixedcost_job: no batch after {seen} read its row within {BATCH_TIMEOUT_S:g} s"
    raise RuntimeError(msg)


def run_batches(
    spark: Any,
    workload: str,
    work: Path,
    bootstrap: str = "",
    batches: int = 12,
    trigger: float = 1.0,
) -> list[dict[str, Any]]:
    """Run ``workload`` in ``spark`` for ``batches`` one-row batches; their ``batch`` events."""
    args = argparse.Namespace(workload=workload, bootstrap=bootstrap)
    writer, feed = _build(spark, args, work)
    query = (
        writer.option("checkpointLocation", str(work / "checkpoint"))
        .trigger(processingTime=f"{trigger:g} seconds")
        .start()
    )
    seen = -1
    events = []
    try:
        for _ in range(batches):
            feed()
            progress = _await_batch(query, seen)
            seen = progress["batchId"]
            events.append(
                {
                    "event": "batch",
                    "batch": seen,
                    "rows": progress["numInputRows"],
                    "timestamp": progress["timestamp"],
                    "durationMs": progress["durationMs"],
                }
            )
            print(json.dumps(events[-1]), flush=True)
    finally:
        query.stop()
    return events


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("workload", choices=WORKLOADS)
    parser.add_argument("--work", required=True, type=Path, help="an empty scratch folder")
    parser.add_argument("--bootstrap", default="")
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--trigger", type=float, default=1.0, help="seconds between triggers")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    use_worker_python()
    config = dict(LOCAL_PROFILE)
    config.update(item.split("=", 1) for item in args.conf)
    spark = local_session("firesteel-fixedcost", config=config)
    print(json.dumps({"event": "ready"}), flush=True)
    try:
        run_batches(spark, args.workload, args.work, args.bootstrap, args.batches, args.trigger)
    finally:
        spark.stop()
    print(json.dumps({"event": "done"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
