"""firesteel's side of the peers group, as a job of its own process.

``python -m benchmarks.peers.firesteel_job WORKLOAD ...`` from the repository root
(the keyed count's processor lives in :mod:`benchmarks.keyed`). Workloads:

- ``identity``: Kafka -> Kafka, ``firesteel.kafka`` source and exactly-once sink;
- ``count``: Kafka -> keyed running count (:func:`firesteel.state.stateful`) -> Kafka,
  exactly-once, the count as the decimal value under the event's key;
- ``count-files``: Parquet files (Spark's file source) -> keyed running count ->
  ``firesteel.files`` Parquet sink, exactly-once.

``--trigger`` is seconds between micro-batches, or ``available-now`` (the job ends
when its input is done); with seconds the job runs until it is killed.

``--workers site-packages`` (the default) starts Spark's Python processes through
:func:`firesteel.testing.workerpython.use_worker_python`, as the test harness does:
they import PySpark from the installed package, compiled, instead of compiling it
from ``pyspark.zip`` in each of the job's dozen processes (profiled in issue 36:
about a third of the Python workers' CPU of a Kafka identity job). ``--workers zip``
keeps Spark's own path, to measure the difference.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from benchmarks.keyed import KeyedCount
from firesteel.core import LOCAL_PROFILE, local_session
from firesteel.state import stateful
from firesteel.state.backend import StateBackend
from firesteel.testing.workerpython import use_worker_python


def _backend(name: str, folder: Path) -> StateBackend:
    if name == "rocksdb":
        from firesteel.rocksdb import RocksDBBackend

        return RocksDBBackend(f"file://{folder}/ck", local_dir=str(folder / "local"))
    from firesteel.backends import HeapBackend

    return HeapBackend(str(folder))


def _kafka_source(spark: Any, args: argparse.Namespace) -> Any:
    reader = (
        spark.readStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.source)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "false")
        .option("checkpointLocation", args.checkpoint)
    )
    if args.max_per_batch:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_per_batch))
    return reader.load()


def _count(frame: Any, args: argparse.Namespace) -> Any:
    return stateful(
        frame,
        key="key",
        processor=KeyedCount(),
        output_schema="key string, count long",
        # Beside the checkpoint, not in it: Spark wants its own `state` folder there empty.
        backend=_backend(args.backend, Path(args.checkpoint).parent / "keyed-state"),
        name="count",
    )


def build(spark: Any, args: argparse.Namespace) -> Any:
    """The streaming writer of ``args.workload``, not started."""
    if args.workload == "count-files":
        events = (
            spark.readStream.schema("seq long, key string")
            .option("maxFilesPerTrigger", args.files_per_batch)
            .parquet(args.source)
        )
        return (
            _count(events, args)
            .writeStream.format("firesteel.files")
            .option("path", args.target)
            .option("format", "parquet")
        )
    frame = _kafka_source(spark, args)
    if args.workload == "count":
        frame = _count(frame.selectExpr("cast(key as string) as key"), args).selectExpr(
            "cast(key as binary) as key", "cast(cast(count as string) as binary) as value"
        )
    else:
        frame = frame.select("key", "value")
    return (
        frame.writeStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.target)
        .option("guarantee", "exactly-once")
        .option("kafka.linger.ms", "5")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("workload", choices=["identity", "count", "count-files"])
    parser.add_argument("--source", required=True, help="input topic, or Parquet folder")
    parser.add_argument("--target", required=True, help="output topic, or folder")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--bootstrap", default="")
    parser.add_argument("--trigger", default="available-now")
    parser.add_argument("--backend", choices=["heap", "rocksdb"], default="heap")
    parser.add_argument("--profile", choices=["local", "default"], default="local")
    parser.add_argument("--max-per-batch", type=int, default=0)
    parser.add_argument("--files-per-batch", type=int, default=1)
    parser.add_argument("--workers", choices=["site-packages", "zip"], default="site-packages")
    args = parser.parse_args(argv)
    if args.workers == "site-packages":
        use_worker_python()
    config = dict(LOCAL_PROFILE) if args.profile == "local" else {"spark.driver.memory": "2g"}
    # Settings to try beside the profile (python -m benchmarks.memory --config KEY=VALUE).
    config.update(json.loads(os.environ.get("FIRESTEEL_BENCH_CONFIG", "{}")))
    spark = local_session("firesteel-peers", config=config)
    print(json.dumps({"event": "ready"}), flush=True)
    writer = build(spark, args).option("checkpointLocation", args.checkpoint)
    if args.trigger == "available-now":
        query = writer.trigger(availableNow=True).start()
    else:
        query = writer.trigger(processingTime=f"{float(args.trigger):g} seconds").start()
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
