"""Metrics on against off: Kafka -> Kafka and the keyed count, alternated in one run.

Goal (issue 48): firesteel's metrics cost at most 3% of throughput, so the side with
metrics on runs at >= 0.97x the side without. The metrics side is every query as it
runs by default: the sink's tasks count rows and bytes and pick up the operator's
snapshot figures, its commit is timed part by part, and every committed batch writes
its record beside the checkpoint. The other side sets the sink option
``metrics=false`` and ``stateful(metrics=False)``. The Kafka source's lag record (one
small write when it plans a batch) is the same on both sides.

- Kafka -> Kafka exactly-once (write-ahead mode), 100 B records from 4 partitions,
  split by ``maxOffsetsPerTrigger`` into :data:`BATCHES` batches with
  ``Trigger.AvailableNow`` (per-batch costs show; no idle trigger wait), timed from
  ``start()`` to the end; the output counted on the raw log.
- keyed count: Parquet events (``seq``, ``key``) by firesteel's file source in
  :data:`BATCHES` batches -> :func:`~firesteel.state.stateful` counting per key on the
  filesystem backend -> the exactly-once file sink; the output counted with pyarrow.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from benchmarks import spark
from benchmarks.bench_kafka import PARTITIONS, fill_topic
from benchmarks.broker import kafka_broker
from benchmarks.framework import Workload
from benchmarks.keyed import KeyedCount

BATCHES = 10
REPETITIONS = 7
FULL = {"records": 300_000, "events": 1_000_000, "keys": 10_000}
QUICK = {"records": 1_000, "events": 2_000, "keys": 50}
QUICK_BATCHES = 2


@dataclass
class _Inputs:
    bootstrap: str = ""
    topic: str = ""
    records: int = 0
    events: int = 0
    batches: int = BATCHES
    scratch: Path | None = None


_STATE = _Inputs()


def _fill(records: int) -> str:
    from firesteel.testing.kafka import create_topic

    topic = create_topic(_STATE.bootstrap, PARTITIONS)
    fill_topic(_STATE.bootstrap, topic, records, 100)
    return topic


def _write_events(folder: Path, events: int, keys: int, files: int) -> None:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(7)
    per_file = -(-events // files)
    for index, start in enumerate(range(0, events, per_file)):
        rows = min(per_file, events - start)
        table = pa.table(
            {
                "seq": np.arange(start, start + rows, dtype=np.int64),
                "key": pa.array(np.char.add("key-", rng.integers(0, keys, rows).astype(str))),
            }
        )
        pq.write_table(table, folder / f"part-{index:05d}.parquet")


@contextmanager
def setup(quick: bool) -> Iterator[None]:
    """The broker, the Spark session, the topic and the event files."""
    sizes = QUICK if quick else FULL
    spark.session()
    with (
        kafka_broker() as bootstrap,
        tempfile.TemporaryDirectory(prefix="firesteel-bench-metrics-") as scratch,
    ):
        _STATE.bootstrap, _STATE.scratch = bootstrap, Path(scratch)
        _STATE.batches = QUICK_BATCHES if quick else BATCHES
        _STATE.topic, _STATE.records = _fill(sizes["records"]), sizes["records"]
        _write_events(_STATE.scratch / "events", sizes["events"], sizes["keys"], _STATE.batches)
        _STATE.events = sizes["events"]
        try:
            yield
        finally:
            _STATE.scratch = None


def _fresh(name: str) -> Path:
    assert _STATE.scratch is not None
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=_STATE.scratch))


def kafka_to_kafka(metrics: bool) -> Callable[[], float]:
    """Kafka -> Kafka exactly-once in :data:`BATCHES` batches; records per second."""

    def run() -> float:
        from firesteel.testing.kafka import create_topic, read_log

        target = create_topic(_STATE.bootstrap, PARTITIONS)
        work = _fresh("kafka")
        per_batch = -(-_STATE.records // _STATE.batches)
        started = time.perf_counter()
        query = (
            spark.session()
            .readStream.format("firesteel.kafka")
            .option("kafka.bootstrap.servers", _STATE.bootstrap)
            .option("checkpointLocation", str(work))
            .option("subscribe", _STATE.topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(per_batch))
            .load()
            .select("key", "value")
            .writeStream.format("firesteel.kafka")
            .option("kafka.bootstrap.servers", _STATE.bootstrap)
            .option("topic", target)
            .option("guarantee", "exactly-once")
            .option("kafka.linger.ms", "5")
            .option("metrics", str(metrics).lower())
            .option("checkpointLocation", str(work))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        elapsed = time.perf_counter() - started
        got = len(read_log(_STATE.bootstrap, target).committed)
        if got != _STATE.records:
            msg = f"bench_metrics: kafka -> kafka wrote {got} of {_STATE.records} records"
            raise RuntimeError(msg)
        shutil.rmtree(work, ignore_errors=True)
        return _STATE.records / elapsed

    return run


def keyed_count(metrics: bool) -> Callable[[], float]:
    """Events -> keyed count (filesystem backend) -> file sink; events per second."""

    def run() -> float:
        from firesteel.backends import FilesystemBackend
        from firesteel.state import stateful

        assert _STATE.scratch is not None
        work = _fresh("keyed")
        events = (
            spark.session()
            .readStream.format("firesteel.files")
            .option("max.files.per.batch", "1")
            .load(str(_STATE.scratch / "events"))
        )
        counted = stateful(
            events,
            key="key",
            processor=KeyedCount(),
            output_schema="key string, count long",
            backend=FilesystemBackend(f"file://{work}/state"),
            name="count",
            metrics=metrics,
        )
        started = time.perf_counter()
        query = (
            counted.writeStream.format("firesteel.files")
            .option("path", str(work / "out"))
            .option("checkpointLocation", str(work / "checkpoint"))
            .option("guarantee", "exactly-once")
            .option("metrics", str(metrics).lower())
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        elapsed = time.perf_counter() - started
        read = spark.rows_read(query)
        if read != _STATE.events or ds.dataset(str(work / "out")).count_rows() == 0:
            msg = f"bench_metrics: keyed count read {read} of {_STATE.events} events"
            raise RuntimeError(msg)
        shutil.rmtree(work, ignore_errors=True)
        return _STATE.events / elapsed

    return run


def workloads(quick: bool) -> list[Workload]:
    """The two queries, metrics on beside metrics off."""
    # Seven, not three: the goal is a 3% difference, and three runs of each side spread
    # over 15% on a quiet machine (Kafka: 33.4k-39.1k and 34.8k-40.4k rows/s).
    repetitions, warmup = (1, 0) if quick else (REPETITIONS, 1)
    sizes = QUICK if quick else FULL
    batches = QUICK_BATCHES if quick else BATCHES
    common = {
        "group": "metrics",
        "baseline_name": "the same query, metrics=false",
        "goal": 0.97,
        "issue": "issue 48",
        "repetitions": repetitions,
        "warmup": warmup,
    }
    return [
        Workload(
            name=f"kafka -> kafka exactly-once, {sizes['records']:,} x 100 B, {batches} batches,"
            " metrics on",
            unit="rows/s",
            firesteel=kafka_to_kafka(metrics=True),
            baseline=kafka_to_kafka(metrics=False),
            **common,  # type: ignore[arg-type]
        ),
        Workload(
            name=f"keyed count -> file sink, {sizes['events']:,} events, {sizes['keys']:,} keys,"
            f" {batches} batches, metrics on",
            unit="events/s",
            firesteel=keyed_count(metrics=True),
            baseline=keyed_count(metrics=False),
            **common,  # type: ignore[arg-type]
        ),
    ]
