"""firesteel beside the Python streaming frameworks a team would pick instead (issue 36).

Peers: Quix Streams (Kafka-native, RocksDB state, exactly-once through Kafka
transactions) and PyFlink (Python ``KeyedProcessFunction`` + ``ValueState``).
Each peer runs in its own virtual environment, created from PyPI on first use
(:mod:`benchmarks.peers.venv`); every side, firesteel's too, is a job script
of :mod:`benchmarks.peers` run as a subprocess and measured from outside
(:mod:`benchmarks.peers.job`): wall time from the job's ``ready`` event (its
engine up, before it reads) to its last output committed, read by a plain
``read_committed`` consumer (:mod:`benchmarks.peers.watch`) or, for a bounded
file job, to its exit; peak memory of its whole process tree (PSS and RSS,
:mod:`benchmarks.peers.job` says how they differ). firesteel runs in
its ``local`` memory profile (:data:`firesteel.core.LOCAL_PROFILE`). Same broker
(:func:`benchmarks.broker.kafka_broker`), same input, sides alternating.

Workloads (issue 36's items):

- (a) Kafka -> Kafka exactly-once identity, 4 partitions, 100 B and 1 KB:
  firesteel at 1 s triggers (the input in 8 batches by ``maxOffsetsPerTrigger``,
  2 in a quick run) and with ``availableNow``, beside Quix; at 100 B also the 1 s
  trigger runs beside the same job whose Python workers import PySpark from
  ``pyspark.zip`` (``firesteel_job --workers zip``: Spark's own path);
- (b) keyed running count Kafka -> Kafka exactly-once, heap and RocksDB state,
  1 s triggers, beside Quix's RocksDB state (firesteel emits each key's count
  once per batch, Quix once per event: the output a micro-batch engine gives);
- (c) the keyed count from files: Spark's Parquet source (:data:`FILE_BATCHES`
  batches, ``availableNow``) -> ``firesteel.files``, beside PyFlink reading the
  same events as text lines into a ``FileSink``, checkpoints every second, the
  matching state backend (hashmap / RocksDB); a PyFlink run that cannot finish
  within :attr:`Sizes.peer_budget_s` (240 s) of its first committed output is
  measured over that window, and its figure's note says so;
- (d) latency at a steady :data:`RATE` records/s: p50 (headline) and p99 from
  produce to committed output, firesteel with back-to-back micro-batches (a
  0 s trigger) beside Quix committing every :data:`QUIX_LATENCY_COMMIT_S` s;
- (e) launch -> first committed output of a small keyed count, beside Quix, and
  against the issue's 5 s goal;
- (f) peak memory: extra figures of every side, and firesteel's (a) and (b)
  runs' peak PSS against the issue's 1 GB goal, and the local profile against Spark's
  settings of the other groups (a 2 GB driver, Spark's defaults otherwise).
"""

from __future__ import annotations

import itertools
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from benchmarks.broker import kafka_broker
from benchmarks.framework import Figure, Measure, Workload
from benchmarks.peers import window
from benchmarks.peers.job import Job
from benchmarks.peers.venv import PYFLINK, QUIX, quix_command
from benchmarks.peers.watch import Watcher

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
PEERS = Path(__file__).resolve().parent / "peers"
PARTITIONS = 4
FILE_BATCHES = 5
FILES = 20
RATE = 1_000
QUIX_LATENCY_COMMIT_S = 0.1
"""Quix's default commit interval is 5 s; its shortest sensible one is its best latency."""
PSS_GOAL_MB = 1024.0
FIRST_OUTPUT_GOAL_S = 5.0


@dataclass(frozen=True)
class Sizes:
    """The inputs and repetitions of a run: :data:`FULL` (issue 36's sizes) or :data:`QUICK`."""

    identity: dict[str, int]
    """Records per record size."""
    events: int
    keys: int
    latency_s: int
    cold_events: int
    repetitions: int
    timeout_s: float
    batches: int
    """Micro-batches of the 1 s trigger runs (``maxOffsetsPerTrigger``)."""
    peer_budget_s: float
    """(c): a PyFlink run still going this long after its first committed output is
    measured over that window (:mod:`benchmarks.peers.window`) and stopped."""


# Two repetitions, not the three: a full run on the two shared cores then
# fits in about an hour; (b) and (c) run once (minutes per side).
FULL = Sizes({"100 B": 1_000_000, "1 KB": 300_000}, 5_000_000, 100_000, 60, 5_000, 2, 3600, 8, 240)
QUICK = Sizes({"100 B": 20_000, "1 KB": 5_000}, 50_000, 1_000, 5, 1_000, 1, 600, 2, 20)
RECORD_BYTES = {"100 B": 100, "1 KB": 1024}
RSS = "peak RSS MB"
PSS = "peak PSS MB"


@dataclass
class _Run:
    bootstrap: str = ""
    scratch: Path | None = None
    sizes: Sizes = QUICK
    topics: dict[str, str] = field(default_factory=dict)
    recorded: dict[str, list[float]] = field(default_factory=dict)
    ids: Iterator[int] = field(default_factory=itertools.count)

    def fresh(self, name: str) -> Path:
        assert self.scratch is not None
        path = self.scratch / f"{name}-{next(self.ids)}"
        path.mkdir(parents=True)
        return path


_RUN = _Run()


def _topic() -> str:
    from firesteel.testing.kafka import create_topic

    return create_topic(_RUN.bootstrap, PARTITIONS)


def _fill(topic: str, records: list[tuple[bytes | None, bytes]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": _RUN.bootstrap, "linger.ms": 20, "acks": "all"})
    for index, (key, value) in enumerate(records):
        # Keyed events go to their key's partition: Quix keeps state per partition.
        where = {} if key is not None else {"partition": index % PARTITIONS}
        while True:
            try:
                producer.produce(topic, value, key, **where)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        msg = f"bench_peers: could not fill {topic}"
        raise RuntimeError(msg)


def _keys(events: int, keys: int) -> list[str]:
    drawn = np.random.default_rng(36).integers(0, keys, events)
    return [f"k{k:06d}" for k in drawn]


def _keyed_events(topic: str, events: int, keys: int) -> None:
    """``events`` events (key ``kNNNNNN``, value the sequence number) into ``topic``."""
    _fill(topic, [(k.encode(), b"%d" % i) for i, k in enumerate(_keys(events, keys))])


def _event_files(folder: Path, events: int, keys: int) -> None:
    """The same events as Parquet files (``parquet/``) and as ``seq,key`` lines (``text/``)."""
    drawn = _keys(events, keys)
    (folder / "parquet").mkdir(parents=True)
    (folder / "text").mkdir()
    for index in range(FILES):
        seq = list(range(index, events, FILES))
        share = drawn[index::FILES]
        table = pa.table({"seq": pa.array(seq, pa.int64()), "key": pa.array(share)})
        pq.write_table(table, folder / "parquet" / f"part-{index:03d}.parquet")
        lines = "".join(f"{s},{k}\n" for s, k in zip(seq, share, strict=True))
        (folder / "text" / f"part-{index:03d}.txt").write_text(lines, encoding="utf-8")


@contextmanager
def setup(quick: bool) -> Iterator[None]:
    """Install the peers if needed, start the broker, write every input once."""
    QUIX.ensure()
    PYFLINK.ensure()
    _RUN.sizes = QUICK if quick else FULL
    sizes = _RUN.sizes
    with (
        kafka_broker() as bootstrap,
        tempfile.TemporaryDirectory(prefix="firesteel-bench-peers-") as scratch,
    ):
        _RUN.bootstrap, _RUN.scratch = bootstrap, Path(scratch)
        for label, records in sizes.identity.items():
            _RUN.topics[label] = _topic()
            payload = b"x" * (RECORD_BYTES[label] - 8)
            _fill(_RUN.topics[label], [(None, b"%08d" % i + payload) for i in range(records)])
        _RUN.topics["events"] = _topic()
        _keyed_events(_RUN.topics["events"], sizes.events, sizes.keys)
        _RUN.topics["cold"] = _topic()
        _keyed_events(_RUN.topics["cold"], sizes.cold_events, min(sizes.keys, 1_000))
        _event_files(_RUN.scratch / "events", sizes.events, sizes.keys)
        try:
            yield
        finally:
            _RUN.topics.clear()
            _RUN.recorded.clear()
            _RUN.scratch = None


def _firesteel(workload: str, source: str, target: str, work: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "benchmarks.peers.firesteel_job",
        workload,
        "--bootstrap",
        _RUN.bootstrap,
        "--source",
        source,
        "--target",
        target,
        "--checkpoint",
        str(work / "checkpoint"),
        *extra,
    ]


def _quix(workload: str, source: str, target: str, work: Path, *extra: str) -> list[str]:
    return quix_command(workload, _RUN.bootstrap, source, target, work / "state", *extra)


Command = Callable[[str, Path], list[str]]
"""The command of one side's run, given its output topic and a fresh work folder."""


def _env() -> dict[str, str]:
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def _record(key: str, value: float) -> None:
    _RUN.recorded.setdefault(key, []).append(value)


def _memory(job: Job) -> dict[str, float]:
    return {PSS: job.peak_pss_mb, RSS: job.peak_rss_mb}


def recorded(key: str) -> Measure:
    """A side that returns, in order, the figures an earlier workload's runs recorded
    under ``key`` (so a goal on the same runs costs no extra run)."""
    taken = itertools.count()

    def take() -> float:
        index = next(taken)
        values = _RUN.recorded.get(key, [])
        if index >= len(values):
            msg = f"bench_peers: no figure {index} recorded under {key!r} (its workload failed?)"
            raise RuntimeError(msg)
        return values[index]

    return take


def kafka_side(
    command: Command,
    expected: int,
    *,
    counts: bool,
    ends: bool,
    record_as: str | None = None,
) -> Measure:
    """One run of ``command`` against a fresh output topic; ``expected`` records (identity)
    or events accounted for by the output counts, per second from ``ready``.

    ``ends``: the job stops by itself (``availableNow``); otherwise it is killed once
    its output is complete. ``record_as``: keep the peak PSS for a goal workload.
    """

    def run() -> Figure:
        target = _topic()
        watcher = Watcher(_RUN.bootstrap, target, PARTITIONS, counts=counts, stamps=False)
        try:
            with Job(command(target, _RUN.fresh("job")), cwd=ROOT, env=_env()) as job:
                ready = job.wait_ready(_RUN.sizes.timeout_s)
                done = watcher.wait_records(
                    expected, _RUN.sizes.timeout_s, lambda: job.check(may_end=ends)
                )
            seen = watcher.output.counted if counts else watcher.output.records
        finally:
            watcher.close()
        if seen != expected:
            msg = f"bench_peers: {command(target, Path('.'))[:4]} committed {seen} of {expected}"
            raise RuntimeError(msg)
        assert job.ready is not None
        if record_as:
            _record(record_as, job.peak_pss_mb)
        return Figure(expected / (done - job.ready), {**_memory(job), "s to ready": ready})

    return run


def identity_sides(
    quick: bool, label: str, trigger: str, profile: str = "local", workers: str = "site-packages"
) -> tuple[Measure, Measure]:
    """(a): firesteel at ``trigger`` and Quix, on the ``label`` records; ``profile`` and
    ``workers`` are ``firesteel_job``'s options of those names."""
    sizes = QUICK if quick else FULL
    records = sizes.identity[label]
    batches = ["--max-per-batch", str(-(-records // sizes.batches))]
    extra = ["--trigger", trigger, "--profile", profile, "--workers", workers]
    extra += batches if trigger != "available-now" else []
    ours = kafka_side(
        lambda target, work: _firesteel("identity", _RUN.topics[label], target, work, *extra),
        records,
        counts=False,
        ends=trigger == "available-now",
        record_as=f"identity {label} {trigger} {profile} {workers}",
    )
    quix = kafka_side(
        lambda target, work: _quix("identity", _RUN.topics[label], target, work),
        records,
        counts=False,
        ends=False,
    )
    return ours, quix


def count_side(sizes: Sizes, backend: str) -> Measure:
    """(b), firesteel: the keyed count Kafka -> Kafka at 1 s triggers on ``backend``."""
    per_batch = -(-sizes.events // sizes.batches)
    return kafka_side(
        lambda target, work: _firesteel(
            "count",
            _RUN.topics["events"],
            target,
            work,
            "--trigger",
            "1",
            "--backend",
            backend,
            "--max-per-batch",
            str(per_batch),
        ),
        sizes.events,
        counts=True,
        ends=False,
        record_as=f"count {backend}",
    )


def quix_count(sizes: Sizes) -> Measure:
    """(b), Quix: the keyed count in Quix's RocksDB state, exactly-once."""
    return kafka_side(
        lambda target, work: _quix("count", _RUN.topics["events"], target, work),
        sizes.events,
        counts=True,
        ends=False,
    )


def _events_folder() -> Path:
    assert _RUN.scratch is not None
    return _RUN.scratch / "events"


def _committed_counts(folder: Path) -> int:
    """Events a Parquet keyed count accounted for: the sum of each key's highest count."""
    table = ds.dataset(folder, format="parquet").to_table()
    return int(
        table.group_by("key").aggregate([("count", "max")]).column("count_max").to_numpy().sum()
    )


def _bounded(job: Job, accounted: Callable[[], int]) -> Figure:
    """Events per second from ``job``'s ready to its exit; ``accounted()`` reads, after the
    exit, how many events its output accounts for (every one of them, or an error)."""
    with job:
        job.wait_ready(_RUN.sizes.timeout_s)
        ended = job.wait_exit(_RUN.sizes.timeout_s)
    counted = accounted()
    if counted != _RUN.sizes.events:
        msg = f"bench_peers: {job.command[:3]}'s output accounts for {counted} events"
        raise RuntimeError(f"{msg} of {_RUN.sizes.events}")
    assert job.ready is not None
    return Figure(_RUN.sizes.events / (ended - job.ready), _memory(job))


def files_side(backend: str) -> Measure:
    """(c), firesteel: Parquet events -> keyed count -> ``firesteel.files``, availableNow."""

    def run() -> Figure:
        work = _RUN.fresh("files")
        command = _firesteel(
            "count-files",
            str(_events_folder() / "parquet"),
            str(work / "out"),
            work,
            "--backend",
            backend,
            "--files-per-batch",
            str(FILES // FILE_BATCHES),
        )
        return _bounded(Job(command, cwd=ROOT, env=_env()), lambda: _committed_counts(work / "out"))

    return run


def flink_side(backend: str) -> Measure:
    """(c), PyFlink: the same events as text lines -> KeyedProcessFunction -> FileSink.

    Its whole run when it finishes within :attr:`Sizes.peer_budget_s` of its first
    committed output; otherwise its rate over that window, and the run says so.
    """

    def run() -> Figure:
        work = _RUN.fresh("flink")
        out = work / "out"
        command = [
            str(PYFLINK.python),
            str(PEERS / "flink_job.py"),
            str(_events_folder() / "text"),
            str(out),
            str(work / "checkpoints"),
            backend,
        ]
        job = Job(command, cwd=work)
        sizes = _RUN.sizes
        seen = window.measure(
            job, window.FinishedLines(out), sizes.events, sizes.peer_budget_s, sizes.timeout_s
        )
        if seen.finished:
            return Figure(seen.rate, _memory(job))
        note = (
            f"rate over a {seen.window_s:.0f} s window of the {sizes.events:,}-event run "
            f"({seen.in_window:,} events committed in it); it did not finish"
        )
        logger.warning("bench_peers (c) PyFlink %s: %s", backend, note)
        return Figure(seen.rate, _memory(job), note)

    return run


def _produce_steadily(topic: str, rate: int, seconds: float) -> int:
    """``rate`` records a second for ``seconds``, each carrying its produce time; the count."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": _RUN.bootstrap, "linger.ms": 0, "acks": "all"})
    padding = b"x" * 80
    started = time.perf_counter()
    sent = 0
    while sent < rate * seconds:
        due = started + sent / rate
        pause = due - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        producer.produce(topic, b"%020d" % time.time_ns() + padding, partition=sent % PARTITIONS)
        producer.poll(0)
        sent += 1
    if producer.flush(60):
        msg = f"bench_peers: could not produce to {topic}"
        raise RuntimeError(msg)
    return sent


def latency_side(command: Callable[[str, str, Path], list[str]], rate: int = RATE) -> Measure:
    """(d): p50 (and p99) ms from produce to committed output at ``rate`` records/s, and
    the last record's: a job that keeps up commits it as soon as the others, one that falls
    behind later by all it fell behind.

    One record is produced first and awaited, so the job's start is not counted.
    """

    def run() -> Figure:
        source, target = _topic(), _topic()
        watcher = Watcher(_RUN.bootstrap, target, PARTITIONS, counts=False, stamps=True)
        timeout = _RUN.sizes.timeout_s
        try:
            with Job(command(source, target, _RUN.fresh("latency")), cwd=ROOT, env=_env()) as job:
                job.wait_ready(timeout)
                _produce_steadily(source, 1, 1)
                watcher.wait_records(1, timeout, job.check)
                sent = _produce_steadily(source, rate, _RUN.sizes.latency_s)
                watcher.wait_records(sent + 1, timeout, job.check)
            latencies = watcher.output.latencies_ms[1:]
        finally:
            watcher.close()
        cuts = statistics.quantiles(latencies, n=100, method="inclusive")
        extra = {"p99 ms": cuts[98], "last record ms": latencies[-1]}
        return Figure(cuts[49], {**extra, **_memory(job)})

    return run


def cold_start_side(command: Command, record_as: str | None = None) -> Measure:
    """(e): seconds from launch to the first committed output of the small keyed count."""

    def run() -> Figure:
        target = _topic()
        watcher = Watcher(_RUN.bootstrap, target, PARTITIONS, counts=True, stamps=False)
        try:
            with Job(command(target, _RUN.fresh("cold")), cwd=ROOT, env=_env()) as job:
                first = watcher.wait_records(1, _RUN.sizes.timeout_s, lambda: job.check(True))
        finally:
            watcher.close()
        seconds = first - job.launched
        if record_as:
            _record(record_as, seconds)
        return Figure(seconds, _memory(job))

    return run


def shared(measure: Measure) -> Callable[[], Measure]:
    """Consumers of one side's runs: a consumer's n-th call returns the n-th run's figure,
    running ``measure`` only when no consumer asked for that run before.

    So one peer run stands beside two firesteel settings (Quix beside firesteel's 1 s
    triggers and its ``availableNow``) and the runs still alternate with the first.
    """
    figures: list[float | Figure] = []

    def consumer() -> Measure:
        calls = itertools.count()

        def take() -> float | Figure:
            index = next(calls)
            if index == len(figures):
                figures.append(measure())
            return figures[index]

        return take

    return consumer


def _against_goal(
    name: str, unit: str, goal: float, recorded_side: Measure, common: dict[str, object]
) -> Workload:
    """A figure of runs recorded by another workload, beside the issue's absolute goal for
    it: the ratio is the figure over the goal, PASS at <= 1."""
    return Workload(
        name=name,
        unit=unit,
        baseline_name=f"the issue's goal, {goal:g} {unit}",
        goal=1.0,
        lower_is_better=True,
        firesteel=recorded_side,
        baseline=lambda: goal,
        **common,  # type: ignore[arg-type]
    )


def workloads(quick: bool) -> list[Workload]:
    """Items (a)-(f) of issue 36; see the module's docstring."""
    sizes = QUICK if quick else FULL
    common = {"group": "peers", "repetitions": sizes.repetitions, "warmup": 0, "issue": "issue 36"}
    out: list[Workload] = []
    quix_count_side = shared(quix_count(sizes))
    for label, records in sizes.identity.items():
        n = f"{records // 1000}k x {label}"
        triggered_runs, quix_runs = identity_sides(quick, label, "1")
        triggered, quix = shared(triggered_runs), shared(quix_runs)
        available_now, _ = identity_sides(quick, label, "available-now")
        out += [
            Workload(
                name=f"(a) kafka -> kafka exactly-once identity, {n}, 1 s triggers",
                unit="rows/s",
                baseline_name="Quix Streams exactly-once",
                goal=3.0,
                firesteel=triggered(),
                baseline=quix(),
                **common,  # type: ignore[arg-type]
            ),
            Workload(
                name=f"(a) kafka -> kafka exactly-once identity, {n}, availableNow",
                unit="rows/s",
                baseline_name="Quix Streams exactly-once",
                goal=None,
                firesteel=available_now,
                baseline=quix(),
                **common,  # type: ignore[arg-type]
            ),
        ]
        if label == next(iter(sizes.identity)):
            out.append(_workers_workload(quick, label, n, triggered(), common))
    first = next(iter(sizes.identity))
    events = f"{sizes.events:,} events, {sizes.keys:,} keys"
    for backend in ("heap", "rocksdb"):
        out.append(
            Workload(
                name=f"(b) keyed running count kafka -> kafka exactly-once, {events}, {backend}",
                unit="events/s",
                baseline_name="Quix Streams exactly-once, RocksDB state",
                goal=3.0,
                firesteel=count_side(sizes, backend),
                baseline=quix_count_side(),
                **{**common, "repetitions": 1},  # type: ignore[arg-type]
            )
        )
    for backend, flink_backend in (("heap", "hashmap"), ("rocksdb", "rocksdb")):
        out.append(
            Workload(
                name=f"(c) keyed running count from files, exactly-once, {events}, {backend}",
                unit="events/s",
                baseline_name=(
                    f"PyFlink KeyedProcessFunction + ValueState, {flink_backend} (whole run, "
                    f"or over a {sizes.peer_budget_s:g} s window when it cannot finish)"
                ),
                goal=10.0,
                firesteel=files_side(backend),
                baseline=flink_side(flink_backend),
                **{**common, "repetitions": 1},  # type: ignore[arg-type]
            )
        )
    out += _latency_and_start(quick, sizes, common, first)
    return out


def _workers_workload(
    quick: bool, label: str, n: str, triggered: Measure, common: dict[str, object]
) -> Workload:
    """(a) at 1 s triggers as measured (Python workers importing PySpark from site-packages)
    beside the same job on Spark's own path (from ``pyspark.zip``): the change's effect."""
    return Workload(
        name=f"(a) kafka -> kafka exactly-once identity, {n}, 1 s triggers: workers' PySpark",
        unit="rows/s",
        baseline_name="PySpark imported from Spark's pyspark.zip",
        goal=None,
        firesteel=triggered,
        baseline=identity_sides(quick, label, "1", workers="zip")[0],
        **common,  # type: ignore[arg-type]
    )


def _latency_and_start(
    quick: bool, sizes: Sizes, common: dict[str, object], first: str
) -> list[Workload]:
    """Items (d), (e) and the (f) goal workloads over runs recorded by (a), (b) and (e)."""
    start_ours = cold_start_side(
        lambda target, work: _firesteel(
            "count", _RUN.topics["cold"], target, work, "--trigger", "1"
        ),
        record_as="cold",
    )
    start_quix = cold_start_side(
        lambda target, work: _quix("count", _RUN.topics["cold"], target, work)
    )
    pss_of = f"identity {first} 1 local site-packages"
    return [
        Workload(
            name=f"(d) latency p50, {RATE:,} records/s for {sizes.latency_s} s, to committed",
            unit="ms",
            baseline_name=f"Quix Streams exactly-once, commit every {QUIX_LATENCY_COMMIT_S:g} s",
            goal=None,
            lower_is_better=True,
            firesteel=latency_side(
                lambda source, target, work: _firesteel(
                    "identity", source, target, work, "--trigger", "0"
                )
            ),
            baseline=latency_side(
                lambda source, target, work: _quix(
                    "identity",
                    source,
                    target,
                    work,
                    "--commit-interval",
                    str(QUIX_LATENCY_COMMIT_S),
                )
            ),
            **common,  # type: ignore[arg-type]
        ),
        Workload(
            name=f"(e) launch -> first committed output, keyed count of {sizes.cold_events:,}",
            unit="s",
            baseline_name="Quix Streams exactly-once",
            goal=None,
            lower_is_better=True,
            firesteel=start_ours,
            baseline=start_quix,
            **common,  # type: ignore[arg-type]
        ),
        _against_goal(
            "(e) launch -> first committed output, warm machine",
            "s",
            FIRST_OUTPUT_GOAL_S,
            recorded("cold"),
            common,
        ),
        _against_goal(
            f"(f) peak PSS of (a) {first}, 1 s triggers, local profile",
            "MB",
            PSS_GOAL_MB,
            recorded(pss_of),
            common,
        ),
        _against_goal(
            "(f) peak PSS of (b) heap, local profile",
            "MB",
            PSS_GOAL_MB,
            recorded("count heap"),
            {**common, "repetitions": 1},
        ),
        Workload(
            name=f"(f) peak PSS of (a) {first}, 1 s triggers: local profile vs the other groups'",
            unit="MB",
            baseline_name="2 GB driver, Spark's defaults",
            goal=None,
            lower_is_better=True,
            firesteel=recorded(pss_of),
            baseline=_pss(identity_sides(quick, first, "1", "default")[0]),
            **common,  # type: ignore[arg-type]
        ),
    ]


def _pss(side: Measure) -> Measure:
    """``side``'s peak PSS as its headline, its peak RSS and throughput kept beside it."""

    def run() -> Figure:
        figure = side()
        assert isinstance(figure, Figure)
        return Figure(figure.extra[PSS], {RSS: figure.extra[RSS], "rows/s": float(figure.value)})

    return run
