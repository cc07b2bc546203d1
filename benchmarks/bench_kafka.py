"""Kafka source and sinks beside raw confluent-kafka, on one local broker, in one run.

Goals (issue 5): source >= 0.8x a raw ``consume(num_messages=...)`` loop,
at-least-once sink >= 0.8x a raw producer loop with the same settings,
exactly-once >= 0.9x at-least-once at 1 s triggers. 100-byte and 1 KB records,
4 partitions, the same broker (tansu started by :func:`setup`, or
``FIRESTEEL_KAFKA_BOOTSTRAP``) for every side.

- source: ``readStream.format("firesteel.kafka")`` from earliest with
  ``Trigger.AvailableNow`` into Spark's ``noop`` sink, timed from ``start()``
  to the end of ``awaitTermination()``; baseline: one raw consumer assigned
  to the 4 partitions calling ``consume(num_messages=10000)`` until it has
  every record, touching each value.
- at-least-once sink: the same source query writing to a fresh topic with
  ``guarantee=at-least-once`` (every delivery report checked); baseline: the
  raw consume loop plus a raw producer with the same settings (``acks=all``,
  idempotence, only-error delivery reports, flush at the end), i.e. the same
  work without Spark.
- exactly-once vs at-least-once: the same Kafka -> Kafka query with 1 s
  processing-time triggers and the input split into 8 batches by
  ``maxOffsetsPerTrigger``, timed until every record is committed.

Every run's output is counted from the raw log afterwards (outside the
timing): a run that lost records fails the benchmark.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from benchmarks import spark

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
from benchmarks.framework import Workload

PARTITIONS = 4
SIZES = {"100 B": 100, "1 KB": 1024}
FULL_RECORDS = {"100 B": 200_000, "1 KB": 60_000}
QUICK_RECORDS = {"100 B": 2_000, "1 KB": 1_000}
TRIGGERED_BATCHES = 8
PRODUCER_SETTINGS = {"acks": "all", "enable.idempotence": True, "linger.ms": 5}


@dataclass
class _Broker:
    bootstrap: str = ""
    topics: dict[str, str] = field(default_factory=dict)
    records: dict[str, int] = field(default_factory=dict)
    runs: Iterator[int] = field(default_factory=itertools.count)


_STATE = _Broker()


def _fill(bootstrap: str, topic: str, records: int, size: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, **PRODUCER_SETTINGS})
    payload = b"x" * (size - 8)
    for index in range(records):
        while True:
            try:
                producer.produce(topic, b"%08d" % index + payload, partition=index % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        msg = f"bench_kafka: could not fill {topic}"
        raise RuntimeError(msg)


@contextmanager
def setup(quick: bool) -> Iterator[None]:
    """Start the broker and the Spark session; fill one input topic per record size."""
    from firesteel.kafka.testing import create_topic, kafka_cluster

    counts = QUICK_RECORDS if quick else FULL_RECORDS
    spark.session()
    with kafka_cluster() as bootstrap:
        _STATE.bootstrap = bootstrap
        for label, size in SIZES.items():
            topic = create_topic(bootstrap, PARTITIONS)
            _fill(bootstrap, topic, counts[label], size)
            _STATE.topics[label] = topic
            _STATE.records[label] = counts[label]
        try:
            yield
        finally:
            _STATE.topics.clear()


def _check(topic: str, expected: int, side: str) -> None:
    from firesteel.kafka.testing import read_log

    got = len(read_log(_STATE.bootstrap, topic).committed)
    if got < expected:
        msg = f"bench_kafka: {side} wrote {got} of {expected} records to {topic}"
        raise RuntimeError(msg)


def _source(label: str, batches: int | None = None) -> DataFrame:
    reader = (
        spark.session()
        .readStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", _STATE.bootstrap)
        .option("subscribe", _STATE.topics[label])
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "false")
    )
    if batches is not None:
        per_batch = -(-_STATE.records[label] // batches)
        reader = reader.option("maxOffsetsPerTrigger", str(per_batch))
    return reader.load().select("key", "value")


def _checkpoint() -> str:
    return tempfile.mkdtemp(prefix="firesteel-bench-kafka-")


def firesteel_source(label: str) -> Callable[[], float]:
    def run() -> float:
        start = time.perf_counter()
        query = (
            _source(label)
            .writeStream.format("noop")
            .option("checkpointLocation", _checkpoint())
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        elapsed = time.perf_counter() - start
        read = sum(p["numInputRows"] for p in query.recentProgress)
        if read != _STATE.records[label]:
            msg = f"bench_kafka: source read {read} of {_STATE.records[label]}"
            raise RuntimeError(msg)
        return _STATE.records[label] / elapsed

    return run


def _raw_consume(label: str, on_values: Callable[[list[bytes | None]], None] | None = None) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": _STATE.bootstrap,
            "group.id": f"bench-{next(_STATE.runs)}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    topic = _STATE.topics[label]
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    remaining = _STATE.records[label]
    try:
        while remaining > 0:
            messages = consumer.consume(num_messages=min(10_000, remaining), timeout=1.0)
            values = [m.value() for m in messages if m.error() is None]
            remaining -= len(values)
            if on_values is not None:
                on_values(values)
    finally:
        consumer.close()


def raw_source(label: str) -> Callable[[], float]:
    def run() -> float:
        start = time.perf_counter()
        _raw_consume(label)
        return _STATE.records[label] / (time.perf_counter() - start)

    return run


def _fresh_topic() -> str:
    from firesteel.kafka.testing import create_topic

    return create_topic(_STATE.bootstrap, PARTITIONS)


def firesteel_sink(
    label: str, guarantee: str, trigger_seconds: float | None
) -> Callable[[], float]:
    def run() -> float:
        target = _fresh_topic()
        # With 1 s triggers the input is split into TRIGGERED_BATCHES batches, so the
        # per-batch cost of transactions shows; without, one batch takes everything.
        batches = TRIGGERED_BATCHES if trigger_seconds is not None else None
        writer = (
            _source(label, batches)
            .writeStream.format("firesteel.kafka")
            .option("kafka.bootstrap.servers", _STATE.bootstrap)
            .option("topic", target)
            .option("guarantee", guarantee)
            .option("kafka.linger.ms", "5")
            .option("checkpointLocation", _checkpoint())
        )
        expected = _STATE.records[label]
        start = time.perf_counter()
        if trigger_seconds is None:
            query = writer.trigger(availableNow=True).start()
            query.awaitTermination()
        else:
            query = writer.trigger(processingTime=f"{trigger_seconds:g} seconds").start()
            while sum(p["numInputRows"] for p in query.recentProgress) < expected:
                if query.exception() is not None:
                    raise RuntimeError(str(query.exception()))
                time.sleep(0.05)
            query.stop()
        elapsed = time.perf_counter() - start
        _check(target, expected, f"firesteel {guarantee}")
        return expected / elapsed

    return run


def raw_produce(label: str) -> Callable[[], float]:
    def run() -> float:
        from confluent_kafka import Producer

        target = _fresh_topic()
        failures: list[str] = []
        producer = Producer(
            {
                "bootstrap.servers": _STATE.bootstrap,
                **PRODUCER_SETTINGS,
                "delivery.report.only.error": True,
                "on_delivery": lambda err, _m: failures.append(err.str()) if err else None,
            }
        )

        def send(values: list[bytes | None]) -> None:
            for value in values:
                while True:
                    try:
                        producer.produce(target, value)
                        break
                    except BufferError:
                        producer.poll(0.05)

        start = time.perf_counter()
        _raw_consume(label, send)
        if producer.flush(120) or failures:
            msg = f"bench_kafka: raw producer failed: {failures[:3]}"
            raise RuntimeError(msg)
        elapsed = time.perf_counter() - start
        _check(target, _STATE.records[label], "raw producer")
        return _STATE.records[label] / elapsed

    return run


def workloads(quick: bool) -> list[Workload]:
    """Source, at-least-once sink and exactly-once sink, for 100 B and 1 KB records."""
    repetitions, warmup = (1, 0) if quick else (3, 1)
    counts = QUICK_RECORDS if quick else FULL_RECORDS
    out = []
    for label in SIZES:
        n = f"{counts[label] // 1000}k" if counts[label] >= 1000 else str(counts[label])
        common = {"group": "kafka", "unit": "rows/s", "repetitions": repetitions, "warmup": warmup}
        out += [
            Workload(
                name=f"kafka source -> noop, {n} x {label}, {PARTITIONS} partitions",
                baseline_name="raw consume(num_messages=10000) loop",
                goal=0.8,
                issue="issue 5",
                firesteel=firesteel_source(label),
                baseline=raw_source(label),
                **common,  # type: ignore[arg-type]
            ),
            Workload(
                name=f"kafka -> kafka at-least-once, {n} x {label}",
                baseline_name="raw consume loop + producer (same settings)",
                goal=0.8,
                issue="issue 5",
                firesteel=firesteel_sink(label, "at-least-once", None),
                baseline=raw_produce(label),
                **common,  # type: ignore[arg-type]
            ),
            Workload(
                name=f"kafka -> kafka exactly-once vs at-least-once, 1 s triggers, {n} x {label}",
                baseline_name="firesteel at-least-once, 1 s triggers",
                goal=0.9,
                issue="issue 5",
                firesteel=firesteel_sink(label, "exactly-once", 1.0),
                baseline=firesteel_sink(label, "at-least-once", 1.0),
                **common,  # type: ignore[arg-type]
            ),
        ]
    return out
