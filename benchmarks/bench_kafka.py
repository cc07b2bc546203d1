"""Kafka source and sinks, each side alone, beside raw confluent-kafka, on one broker, in one run.

Goals (issues 5 and 12): source >= 0.8x raw ``consume()``, at-least-once sink
>= 0.8x raw ``produce()``, exactly-once >= 0.9x at-least-once at 1 s
triggers. 100-byte and 1 KB records, 4 partitions, the same broker for every
side (:func:`benchmarks.broker.kafka_broker`: a real Apache Kafka broker, or the
cluster ``FIRESTEEL_KAFKA_BOOTSTRAP`` names). Raw sides run
in :data:`TASKS` processes, as many as Spark runs tasks at once (``local[2]``),
started before the timing.

- source alone: ``readStream.format("firesteel.kafka")`` from earliest with
  ``Trigger.AvailableNow`` into Spark's ``noop`` sink, timed from ``start()``
  to the end of ``awaitTermination()``; baseline: :data:`TASKS` raw consumers,
  each assigned its share of the partitions, calling
  ``consume(num_messages=10000)`` until it has its records, touching each value.
- sink alone, at-least-once: Spark's own (JVM) streaming Parquet source over
  files of the same values, written by ``format("firesteel.kafka")`` with
  ``guarantee=at-least-once``; baseline: :data:`TASKS` raw producers, each
  reading its share of the same files with pyarrow and producing with the
  same settings (``acks=all``, idempotence, ``linger.ms=5``, flush at the end).
- sink alone, exactly-once beside at-least-once: the same query, one batch,
  ``guarantee=exactly-once`` in its default ``exactly.once.mode=write-ahead``
  (segments in the checkpoint, one transaction per segment from the commit).
- the two exactly-once modes beside each other (issue 35), 100 B records
  only: ``exactly.once.mode=write-ahead`` beside ``in-task`` (a transaction
  per task and its commit marker), the sink alone in one batch and Kafka ->
  Kafka at 1 s triggers; the default follows these figures (README,
  "Exactly-once modes").
- end to end: Kafka -> Kafka at-least-once beside one raw consume + produce
  loop, and exactly-once beside at-least-once with 1 s processing-time
  triggers and the input split into 8 batches by ``maxOffsetsPerTrigger``,
  timed until every record is committed: the per-batch cost of transactions.
- exactly-once beside at-least-once with 10 s triggers: the input split into
  :data:`LONG_TRIGGER_BATCHES` batches (500k x 100 B or 150k x 1 KB, 2-3 s
  of work each here), timed by the batches' own
  ``durationMs.triggerExecution`` (offsets, plan, write, commit), not the
  wall clock: with a bounded input the wall clock of a 10 s trigger measures
  the idle wait before the next batch, not the sink.

Every run's output is counted from the raw log afterwards (outside the
timing): a run that lost records fails the benchmark.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks import spark
from benchmarks.broker import kafka_broker

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
from benchmarks.framework import Measure, Workload, measured_once

PARTITIONS = 4
TASKS = 2
"""Processes of the raw sides: the tasks ``local[2]`` runs at once."""
FILES = 8
SIZES = {"100 B": 100, "1 KB": 1024}
FULL_RECORDS = {"100 B": 1_000_000, "1 KB": 300_000}
"""Large enough that a query's fixed cost (start, first plan, worker start-up, about
2.5 s here) does not dominate: at 200k records it made the source look 13x slower."""
QUICK_RECORDS = {"100 B": 1_000}
"""The quick run (a test of the code paths, not a measurement) takes one record size:
the other runs the same code."""
TRIGGERED_BATCHES = 8
"""Batches of the 1 s trigger workloads."""
QUICK_TRIGGERED_BATCHES = 2
LONG_TRIGGER_BATCHES = 2
"""Batches of the 10 s trigger workloads."""
PRODUCER_SETTINGS = {"acks": "all", "enable.idempotence": True, "linger.ms": 5}


@dataclass
class _Broker:
    bootstrap: str = ""
    topics: dict[str, str] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)
    records: dict[str, int] = field(default_factory=dict)
    scratch: Path | None = None
    runs: Iterator[int] = field(default_factory=itertools.count)
    pool: ProcessPoolExecutor | None = None


_STATE = _Broker()


def fill_topic(bootstrap: str, topic: str, records: int, size: int) -> None:
    """Produce ``records`` records of ``size`` bytes (an 8-digit sequence number, then
    padding) round-robin over the :data:`PARTITIONS` partitions of ``topic``."""
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


def _values(records: int, size: int) -> list[bytes]:
    payload = b"x" * (size - 8)
    return [b"%08d" % index + payload for index in range(records)]


def _write_files(folder: Path, values: list[bytes]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    for index in range(FILES):
        share = pa.array(values[index::FILES], pa.binary())
        pq.write_table(pa.table({"value": share}), folder / f"part-{index}.parquet")


def _ready() -> int:
    """Import the client and hold the process a moment, so every pool process gets started."""
    import confluent_kafka  # noqa: F401

    time.sleep(0.5)
    return os.getpid()


@contextmanager
def setup(quick: bool) -> Iterator[None]:
    """Start the broker, the Spark session and the raw sides' processes; fill the inputs."""
    from firesteel.testing.kafka import create_topic

    counts = QUICK_RECORDS if quick else FULL_RECORDS
    spark.session()
    context = multiprocessing.get_context("spawn")
    with (
        kafka_broker() as bootstrap,
        tempfile.TemporaryDirectory(prefix="firesteel-bench-kafka-in-") as scratch,
        ProcessPoolExecutor(max_workers=TASKS, mp_context=context) as pool,
    ):
        _STATE.bootstrap, _STATE.pool, _STATE.scratch = bootstrap, pool, Path(scratch)
        pids = {f.result() for f in [pool.submit(_ready) for _ in range(TASKS)]}
        if len(pids) != TASKS:
            msg = f"bench_kafka: {len(pids)} of {TASKS} raw-side processes started"
            raise RuntimeError(msg)
        for label in counts:
            size = SIZES[label]
            topic = create_topic(bootstrap, PARTITIONS)
            fill_topic(bootstrap, topic, counts[label], size)
            _STATE.topics[label] = topic
            _STATE.records[label] = counts[label]
            _STATE.files[label] = Path(scratch) / label.replace(" ", "")
            _write_files(_STATE.files[label], _values(counts[label], size))
        try:
            yield
        finally:
            _STATE.topics.clear()
            _STATE.files.clear()
            _STATE.pool = _STATE.scratch = None


def _check(topic: str, expected: int, side: str) -> None:
    from firesteel.testing.kafka import read_log

    got = len(read_log(_STATE.bootstrap, topic).committed)
    if got < expected:
        msg = f"bench_kafka: {side} wrote {got} of {expected} records to {topic}"
        raise RuntimeError(msg)


def _source(label: str, checkpoint: str, batches: int | None = None) -> DataFrame:
    reader = (
        spark.session()
        .readStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", _STATE.bootstrap)
        .option("checkpointLocation", checkpoint)
        .option("subscribe", _STATE.topics[label])
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "false")
    )
    if batches is not None:
        per_batch = -(-_STATE.records[label] // batches)
        reader = reader.option("maxOffsetsPerTrigger", str(per_batch))
    return reader.load().select("key", "value")


def _checkpoint() -> str:
    """A fresh checkpoint folder inside the scratch folder, so teardown removes it."""
    return tempfile.mkdtemp(prefix="checkpoint-", dir=_STATE.scratch)


def firesteel_source(label: str) -> Callable[[], float]:
    def run() -> float:
        start = time.perf_counter()
        checkpoint = _checkpoint()
        query = (
            _source(label, checkpoint)
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
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


def _consume_share(bootstrap: str, topic: str, partitions: list[int], records: int) -> int:
    """One raw side process: consume ``partitions`` from offset 0 until ``records`` arrived."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{os.getpid()}-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    remaining = records
    touched = 0
    try:
        while remaining > 0:
            for message in consumer.consume(num_messages=min(10_000, remaining), timeout=1.0):
                if message.error() is None:
                    touched += len(message.value() or b"")
                    remaining -= 1
    finally:
        consumer.close()
    return touched


def _shares(items: list[int]) -> list[list[int]]:
    return [items[task::TASKS] for task in range(TASKS)]


def _in_processes(calls: list[tuple[Callable[..., int], tuple[object, ...]]]) -> None:
    assert _STATE.pool is not None
    for future in [_STATE.pool.submit(function, *args) for function, args in calls]:
        future.result()


def _reader_share(bootstrap: str, topic: str, partitions: list[int], records: int) -> int:
    """One process of firesteel's range reader without Spark: every record of ``partitions``
    into Arrow batches, as a source task does before Spark takes them over."""
    from firesteel.core.options import parse_options
    from firesteel.kafka.options import PASSTHROUGH, KafkaSourceOptions
    from firesteel.kafka.reader import OffsetRange, RangeReader, output_schema

    # Only the source's driver side and bad records' counts use the checkpoint.
    options = parse_options(
        KafkaSourceOptions,
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": topic,
            "checkpointLocation": tempfile.gettempdir(),
        },
        connector="firesteel.kafka",
        passthrough_prefixes=PASSTHROUGH,
    )
    reader = RangeReader(options, None, None, output_schema(options.include_headers, None))
    rows = 0
    for partition in partitions:
        end = len(range(partition, records, PARTITIONS))
        rows += sum(b.num_rows for b in reader.read(OffsetRange(topic, partition, 0, end)))
    return rows


def _per_share(
    label: str, function: Callable[[str, str, list[int], int], int], total_records: bool
) -> Callable[[], float]:
    """TASKS processes of ``function``, each with its share of the partitions; rows/s.

    ``function`` gets the share's record count, or the topic's when ``total_records``.
    """

    def run() -> float:
        total = _STATE.records[label]
        calls: list[tuple[Callable[..., int], tuple[object, ...]]] = [
            (
                function,
                (
                    _STATE.bootstrap,
                    _STATE.topics[label],
                    share,
                    total
                    if total_records
                    else sum(len(range(p, total, PARTITIONS)) for p in share),
                ),
            )
            for share in _shares(list(range(PARTITIONS)))
        ]
        start = time.perf_counter()
        _in_processes(calls)
        return total / (time.perf_counter() - start)

    return run


def raw_source(label: str) -> Callable[[], float]:
    """TASKS raw consumers, each with its share of the partitions."""
    return _per_share(label, _consume_share, total_records=False)


def reader_alone(label: str) -> Callable[[], float]:
    """TASKS processes of firesteel's range reader, without Spark, same shares."""
    return _per_share(label, _reader_share, total_records=True)


def _fresh_topic() -> str:
    from firesteel.testing.kafka import create_topic

    return create_topic(_STATE.bootstrap, PARTITIONS)


def firesteel_sink(
    label: str,
    guarantee: str,
    trigger_seconds: float | None,
    batches: int | None = None,
    busy_time: bool = False,
    mode: str = "write-ahead",
) -> Callable[[], float]:
    """Kafka -> the firesteel.kafka sink; records per second of wall time, or of the
    batches' own execution time when ``busy_time`` (a long trigger's idle wait excluded).

    With a trigger interval the input is split into ``batches`` batches, so the
    per-batch cost of transactions shows; without, one batch takes everything.
    ``mode`` is the exactly-once sink's ``exactly.once.mode``.
    """

    def run() -> float:
        target = _fresh_topic()
        checkpoint = _checkpoint()
        writer = (
            _source(label, checkpoint, batches)
            .writeStream.format("firesteel.kafka")
            .option("kafka.bootstrap.servers", _STATE.bootstrap)
            .option("topic", target)
            .option("guarantee", guarantee)
            .option("exactly.once.mode", mode)
            .option("kafka.linger.ms", "5")
            .option("checkpointLocation", checkpoint)
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
        if busy_time:
            elapsed = sum(p["durationMs"]["triggerExecution"] for p in query.recentProgress) / 1000
        _check(target, expected, f"firesteel {guarantee}")
        return expected / elapsed

    return run


def firesteel_sink_alone(
    label: str, guarantee: str, mode: str = "write-ahead"
) -> Callable[[], float]:
    """Spark's own Parquet source -> the firesteel.kafka sink, one batch (``mode``: the
    exactly-once sink's ``exactly.once.mode``)."""

    def run() -> float:
        target = _fresh_topic()
        expected = _STATE.records[label]
        start = time.perf_counter()
        query = (
            spark.session()
            .readStream.schema("value binary")
            .parquet(str(_STATE.files[label]))
            .writeStream.format("firesteel.kafka")
            .option("kafka.bootstrap.servers", _STATE.bootstrap)
            .option("topic", target)
            .option("guarantee", guarantee)
            .option("exactly.once.mode", mode)
            .option("kafka.linger.ms", "5")
            .option("checkpointLocation", _checkpoint())
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        elapsed = time.perf_counter() - start
        _check(target, expected, f"firesteel {guarantee} sink")
        return expected / elapsed

    return run


def _produce_share(bootstrap: str, topic: str, files: list[str]) -> int:
    """One raw side process: produce every value of ``files`` (read with pyarrow), then flush."""
    import pyarrow.parquet as pq
    from confluent_kafka import Producer

    failures: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            **PRODUCER_SETTINGS,
            "delivery.report.only.error": True,
            "on_delivery": lambda err, _m: failures.append(err.str()) if err else None,
        }
    )
    sent = 0
    for path in files:
        for value in pq.read_table(path, columns=["value"]).column("value").to_pylist():
            while True:
                try:
                    producer.produce(topic, value)
                    break
                except BufferError:
                    producer.poll(0.05)
            sent += 1
    if producer.flush(120) or failures:
        msg = f"bench_kafka: raw producer failed: {failures[:3]}"
        raise RuntimeError(msg)
    return sent


def raw_produce_files(label: str) -> Callable[[], float]:
    """TASKS raw producers, each with its share of the input files."""

    def run() -> float:
        target = _fresh_topic()
        files = sorted(str(p) for p in _STATE.files[label].iterdir())
        calls: list[tuple[Callable[..., int], tuple[object, ...]]] = [
            (_produce_share, (_STATE.bootstrap, target, [files[i] for i in share]))
            for share in _shares(list(range(len(files))))
        ]
        start = time.perf_counter()
        _in_processes(calls)
        elapsed = time.perf_counter() - start
        _check(target, _STATE.records[label], "raw producers")
        return _STATE.records[label] / elapsed

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
    """Each side alone and end to end, for 100 B and 1 KB records."""
    repetitions, warmup = (1, 0) if quick else (3, 1)
    counts = QUICK_RECORDS if quick else FULL_RECORDS
    # The quick run (a test) checks the trigger paths without their 1 s and 10 s waits.
    trigger, long_trigger = (0.2, 0.5) if quick else (1.0, 10.0)
    out = []
    triggered = QUICK_TRIGGERED_BATCHES if quick else TRIGGERED_BATCHES
    # A quick run measures the write-ahead sides the mode workloads share with the
    # exactly-once vs at-least-once ones once.
    share: Callable[[Measure], Measure] = measured_once if quick else (lambda side: side)
    for label in counts:
        n = f"{counts[label] // 1000}k" if counts[label] >= 1000 else str(counts[label])
        common = {"group": "kafka", "unit": "rows/s", "repetitions": repetitions, "warmup": warmup}
        alone = share(firesteel_sink_alone(label, "exactly-once"))
        triggered_side = share(firesteel_sink(label, "exactly-once", trigger, triggered))
        out += [
            Workload(
                name=f"kafka source alone -> noop, {n} x {label}, {PARTITIONS} partitions",
                baseline_name=f"{TASKS} raw consume(num_messages=10000) processes",
                goal=0.8,
                issue="issue 12",
                firesteel=firesteel_source(label),
                baseline=raw_source(label),
                **common,  # type: ignore[arg-type]
            ),
            Workload(
                name=f"kafka source's range reader alone (no Spark), {n} x {label}",
                baseline_name=f"{TASKS} raw consume(num_messages=10000) processes",
                goal=None,
                issue="issue 12",
                firesteel=reader_alone(label),
                baseline=raw_source(label),
                **common,  # type: ignore[arg-type]
            ),
            Workload(
                name=f"kafka sink alone at-least-once (Spark's parquet source), {n} x {label}",
                baseline_name=f"{TASKS} raw produce() processes over the same files",
                goal=0.8,
                issue="issue 12",
                firesteel=firesteel_sink_alone(label, "at-least-once"),
                baseline=raw_produce_files(label),
                **common,  # type: ignore[arg-type]
            ),
            Workload(
                name=f"kafka sink alone exactly-once vs at-least-once, one batch, {n} x {label}",
                baseline_name="firesteel at-least-once sink alone",
                goal=None,
                issue="issue 12",
                firesteel=alone,
                baseline=firesteel_sink_alone(label, "at-least-once"),
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
                name=(
                    f"kafka -> kafka exactly-once vs at-least-once, {trigger:g} s triggers, "
                    f"{n} x {label}"
                ),
                baseline_name=f"firesteel at-least-once, {trigger:g} s triggers",
                goal=0.9,
                issue="issue 5",
                firesteel=triggered_side,
                baseline=firesteel_sink(label, "at-least-once", trigger, triggered),
                **common,  # type: ignore[arg-type]
            ),
            Workload(
                name=(
                    f"kafka -> kafka exactly-once vs at-least-once, {long_trigger:g} s triggers "
                    f"(busy time), {n} x {label}"
                ),
                baseline_name=f"firesteel at-least-once, {long_trigger:g} s triggers (busy time)",
                goal=None,
                issue="issue 12",
                firesteel=firesteel_sink(
                    label, "exactly-once", long_trigger, LONG_TRIGGER_BATCHES, busy_time=True
                ),
                baseline=firesteel_sink(
                    label, "at-least-once", long_trigger, LONG_TRIGGER_BATCHES, busy_time=True
                ),
                **common,  # type: ignore[arg-type]
            ),
        ]
        if label == "100 B":
            out += _mode_workloads(n, label, (alone, triggered_side), trigger, triggered, common)
    return out


def _mode_workloads(
    n: str,
    label: str,
    sides: tuple[Measure, Measure],
    trigger: float,
    triggered: int,
    common: dict[str, object],
) -> list[Workload]:
    """The write-ahead mode (``sides``: the sink alone, and at triggers) beside the in-task
    mode (issue 35)."""
    return [
        Workload(
            name=f"kafka sink alone exactly-once write-ahead vs in-task, one batch, {n} x {label}",
            baseline_name="firesteel exactly-once in-task sink alone",
            goal=None,
            issue="issue 35",
            firesteel=sides[0],
            baseline=firesteel_sink_alone(label, "exactly-once", "in-task"),
            **common,  # type: ignore[arg-type]
        ),
        Workload(
            name=(
                f"kafka -> kafka exactly-once write-ahead vs in-task, {trigger:g} s triggers, "
                f"{n} x {label}"
            ),
            baseline_name=f"firesteel exactly-once in-task, {trigger:g} s triggers",
            goal=None,
            issue="issue 35",
            firesteel=sides[1],
            baseline=firesteel_sink(label, "exactly-once", trigger, triggered, mode="in-task"),
            **common,  # type: ignore[arg-type]
        ),
    ]
