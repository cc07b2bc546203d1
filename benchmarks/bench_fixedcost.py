"""The micro-batch's fixed cost: a 1-row batch from trigger to commit, split by phase.

Each side is one job process (:mod:`benchmarks.fixedcost_job`, ``LOCAL_PROFILE``,
``local[2]``, 1 s triggers) that feeds one row, waits for the batch that reads it
to commit, and feeds the next; its first :data:`WARM_BATCHES` batches (the query's
start, Spark's Python processes starting) are left out. The headline is the median
``triggerExecution`` of the remaining batches, from Spark's own query progress;
below it (:mod:`benchmarks.phases`) the median of every phase Spark reports
(``latestOffset`` ... ``commitOffsets``) and of firesteel's own steps inside them,
logged at DEBUG by each Python process Spark runs (``source.*`` in the source's
runner and read tasks, ``writer.*`` where the sink's writer is built, ``sink.write``
in the write tasks, ``sink.commit`` and its ``wal.*`` / ``kafka.*`` steps in the
sink's commit), and how many Python processes first logged in a batch.

Goal (issue 51): a 1-row exactly-once Kafka -> Kafka batch (the default,
``write-ahead``) in <= 300 ms on a quiet machine; the baseline of that workload is
the goal itself, so the ratio is the cost over 300 ms (PASS at <= 1). The in-task
mode, at-least-once, files -> files and a keyed count stand beside the same figure,
reported only; files -> files also beside Spark's own Parquet source and sink.

Then what the fixed cost sets, measured with the ``peers`` group's jobs and rules
(:mod:`benchmarks.bench_peers`, its firesteel job in ``LOCAL_PROFILE``, Quix Streams
3.28 in its own virtual environment, each run a process measured from outside):
Kafka -> Kafka exactly-once, :data:`RECORDS` x 100 B on 4 partitions at 1 s triggers
in :data:`BATCHES` batches, against Quix Streams exactly-once (goal >= 3x) and against
the raw client (:mod:`benchmarks.peers.raw_job`: confluent-kafka's own transactional
consume-produce loop in one process, the ceiling of a Python framework on it), with
the job's peak PSS beside the issue's 1.2 GB; and the p50 (p99 beside it) latency
from produce to committed output at 1,000 records/s for 60 s (0 s trigger) against
Quix committing every 0.1 s, and against the issue's 1 s; the same at
:data:`KEEP_UP_RATE` records/s, whose last record's latency says whether a 0 s trigger
keeps up (the shortest trigger there is).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from benchmarks import spark
from benchmarks.broker import kafka_broker
from benchmarks.fixedcost_job import run_batches
from benchmarks.framework import Figure, Measure, Workload, measured_once
from benchmarks.phases import batch_phases, medians, parse_timings

ROOT = Path(__file__).resolve().parent.parent
GOAL_MS = 300.0
LATENCY_GOAL_MS = 1000.0
PSS_GOAL_MB = 1200.0
KEEP_UP_RATE = 10_000
"""Issue 51's rate for the shortest trigger that keeps up: a 0 s trigger (the next batch as
soon as the last committed) keeps up when the last record's latency stays near the p99."""
RECORDS = 1_000_000
BATCHES = 8
WARM_BATCHES = 3
"""Batches left out at the start of each job: the first pays the query's start."""
FULL_BATCHES = 15
JOB_TIMEOUT_S = 900.0


@dataclass
class _Run:
    bootstrap: str = ""
    scratch: Path | None = None
    batches: int = FULL_BATCHES
    runs: int = 0

    def fresh(self, name: str) -> Path:
        assert self.scratch is not None
        self.runs += 1
        path = self.scratch / f"{name}-{self.runs}"
        path.mkdir(parents=True)
        return path


_RUN = _Run()


@contextmanager
def setup(quick: bool) -> Iterator[None]:
    """A broker and a scratch folder for the group, and the peers' input (:func:`_peers`)."""
    with (
        kafka_broker() as bootstrap,
        tempfile.TemporaryDirectory(prefix="firesteel-bench-fixedcost-") as scratch,
    ):
        _RUN.bootstrap, _RUN.scratch = bootstrap, Path(scratch)
        try:
            with _peers(quick):
                yield
        finally:
            _RUN.scratch = None


def run_job(workload: str, *conf: str) -> tuple[list[dict[str, object]], list[str]]:
    """Run :mod:`benchmarks.fixedcost_job` to its end: its batch events and its stderr lines."""
    work = _RUN.fresh(workload)
    command = [
        sys.executable,
        "-m",
        "benchmarks.fixedcost_job",
        workload,
        "--work",
        str(work),
        "--bootstrap",
        _RUN.bootstrap,
        "--batches",
        str(_RUN.batches),
        *(f"--conf={item}" for item in conf),
    ]
    env = {
        **os.environ,
        "FIRESTEEL_LOG_LEVEL": "DEBUG",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=JOB_TIMEOUT_S)
    finally:
        # The job's JVM and Python workers are in its session: none may outlive it.
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    batches = [event for event in events if event.get("event") == "batch"]
    if process.returncode != 0 or len(batches) < _RUN.batches:
        tail = "\n".join(err.splitlines()[-30:])
        msg = (
            f"bench_fixedcost: {workload} ended with status {process.returncode} after "
            f"{len(batches)} of {_RUN.batches} batches; its last output:\n{tail}"
        )
        raise RuntimeError(msg)
    return batches, err.splitlines()


def in_session(workload: str) -> Measure:
    """``workload`` in the benchmarks' own session (no job process, no phases): the quick
    run, which proves the path and the report and measures nothing."""

    def run() -> Figure:
        batches = run_batches(spark.session(), workload, _RUN.fresh(workload), _RUN.bootstrap, 2)
        return Figure(float(batches[-1]["durationMs"]["triggerExecution"]))

    return run


def fixed_cost(workload: str, *conf: str) -> Measure:
    """One job of ``workload``: the median ``triggerExecution`` ms of its 1-row batches,
    every phase's median beside it."""

    def run() -> Figure:
        batches, lines = run_job(workload, *conf)
        per_batch = batch_phases(batches, parse_timings(lines))
        kept = per_batch[min(WARM_BATCHES, len(per_batch) - 1) :]
        figures = medians(kept)
        note = f"median of {len(kept)} one-row batches after {len(per_batch) - len(kept)} left out"
        return Figure(figures.pop("triggerExecution"), figures, note)

    return run


@contextmanager
def _peers(quick: bool) -> Iterator[None]:
    """The ``peers`` group's state for its sides: this group's broker, a topic of
    :data:`RECORDS` x 100 B (fewer in a quick run), Quix Streams installed."""
    from benchmarks import bench_peers as peers

    peers.QUIX.ensure()
    records = 20_000 if quick else RECORDS
    sizes = peers.QUICK if quick else peers.FULL
    state = peers._RUN
    state.bootstrap, state.scratch = _RUN.bootstrap, _RUN.fresh("peers")
    state.sizes = dataclasses.replace(
        sizes, identity={"100 B": records}, batches=BATCHES, repetitions=1
    )
    state.topics["100 B"] = peers._topic()
    peers._fill(state.topics["100 B"], [(None, b"%08d" % i + b"x" * 92) for i in range(records)])
    try:
        yield
    finally:
        state.topics.clear()
        state.recorded.clear()
        state.scratch = None


def peer_workloads(quick: bool, common: dict[str, object]) -> list[Workload]:
    """Throughput and latency of Kafka -> Kafka exactly-once beside Quix Streams, and the
    peak PSS and p50 latency beside the issue's goals (the ``peers`` group's sides)."""
    from benchmarks import bench_peers as peers

    triggered_run, quix = peers.identity_sides(quick, "100 B", "1")
    triggered = peers.shared(triggered_run)
    records = 20_000 if quick else RECORDS
    raw = peers.kafka_side(
        lambda target, work: [
            sys.executable,
            str(ROOT / "benchmarks" / "peers" / "raw_job.py"),
            peers._RUN.bootstrap,
            peers._RUN.topics["100 B"],
            target,
        ],
        records,
        counts=False,
        ends=False,
    )
    pss = "identity 100 B 1 local site-packages"

    def quix_latency(source: str, target: str, work: Path) -> list[str]:
        interval = str(peers.QUIX_LATENCY_COMMIT_S)
        return peers._quix("identity", source, target, work, "--commit-interval", interval)

    def firesteel_latency(source: str, target: str, work: Path) -> list[str]:
        return peers._firesteel("identity", source, target, work, "--trigger", "0")

    latency = peers.shared(peers.latency_side(firesteel_latency))
    latency_quix = peers.latency_side(quix_latency)
    keep_up = peers.latency_side(firesteel_latency, KEEP_UP_RATE)
    keep_up_quix = peers.latency_side(quix_latency, KEEP_UP_RATE)
    return [
        Workload(
            name=f"kafka -> kafka exactly-once, {records // 1000}k x 100 B, 1 s triggers "
            f"({BATCHES} batches)",
            unit="rows/s",
            baseline_name="Quix Streams exactly-once",
            goal=3.0,
            firesteel=triggered(),
            baseline=quix,
            **common,  # type: ignore[arg-type]
        ),
        Workload(
            name=f"kafka -> kafka exactly-once, {records // 1000}k x 100 B, 1 s triggers, "
            "beside the raw client",
            unit="rows/s",
            baseline_name="confluent-kafka's transactional consume-produce loop, one process, "
            "commit every 1 s",
            goal=None,
            firesteel=triggered(),
            baseline=raw,
            **common,  # type: ignore[arg-type]
        ),
        Workload(
            name="peak PSS of that firesteel job, local profile",
            unit="MB",
            baseline_name=f"the issue's goal, {PSS_GOAL_MB:g} MB",
            goal=1.0,
            lower_is_better=True,
            firesteel=peers.recorded(pss),
            baseline=lambda: PSS_GOAL_MB,
            **common,  # type: ignore[arg-type]
        ),
        Workload(
            name=f"latency p50, {peers.RATE:,} records/s, produce -> committed (0 s trigger)",
            unit="ms",
            baseline_name=f"Quix Streams, commit every {peers.QUIX_LATENCY_COMMIT_S:g} s",
            goal=None,
            lower_is_better=True,
            firesteel=latency(),
            baseline=latency_quix,
            **common,  # type: ignore[arg-type]
        ),
        Workload(
            name=f"keeping up at {KEEP_UP_RATE:,} records/s with a 0 s trigger: latency p50, "
            "produce -> committed",
            unit="ms",
            baseline_name=f"Quix Streams, commit every {peers.QUIX_LATENCY_COMMIT_S:g} s",
            goal=None,
            lower_is_better=True,
            firesteel=keep_up,
            baseline=keep_up_quix,
            **common,  # type: ignore[arg-type]
        ),
        Workload(
            name="latency p50 of that firesteel run",
            unit="ms",
            baseline_name=f"the issue's goal, {LATENCY_GOAL_MS:g} ms",
            goal=1.0,
            lower_is_better=True,
            firesteel=latency(),
            baseline=lambda: LATENCY_GOAL_MS,
            **common,  # type: ignore[arg-type]
        ),
    ]


def workloads(quick: bool) -> list[Workload]:
    """The fixed cost of each path beside the goal, files -> files also beside Spark's own."""
    common = {"group": "fixedcost", "repetitions": 1, "warmup": 0, "issue": "issue 51"}
    quick_side = measured_once(in_session("kafka"))

    def side(workload: str) -> Measure:
        # A quick run is part of the test suite: one short query in the running session
        # stands for every side instead of a job process (a JVM) per side.
        return quick_side if quick else fixed_cost(workload)

    goal = f"the issue's goal, {GOAL_MS:g} ms"
    one_row = "ms from trigger to commit, 1-row batches"
    out = [
        Workload(
            name=f"{one_row}, kafka -> kafka exactly-once (write-ahead, the default)",
            unit="ms",
            baseline_name=goal,
            goal=1.0,
            lower_is_better=True,
            firesteel=side("kafka"),
            baseline=lambda: GOAL_MS,
            **common,  # type: ignore[arg-type]
        )
    ]
    for workload, what in (
        ("kafka-in-task", "kafka -> kafka exactly-once, in-task"),
        ("kafka-at-least-once", "kafka -> kafka at-least-once"),
        ("keyed", "kafka -> keyed count (heap) -> kafka exactly-once"),
    ):
        out.append(
            Workload(
                name=f"{one_row}, {what}",
                unit="ms",
                baseline_name=goal,
                goal=None,
                lower_is_better=True,
                firesteel=side(workload),
                baseline=lambda: GOAL_MS,
                **common,  # type: ignore[arg-type]
            )
        )
    out.append(
        Workload(
            name=f"{one_row}, files -> files exactly-once (Parquet)",
            unit="ms",
            baseline_name="Spark's Parquet source and sink, the same job",
            goal=None,
            lower_is_better=True,
            firesteel=side("files"),
            baseline=side("spark-files"),
            **common,  # type: ignore[arg-type]
        )
    )
    return out + peer_workloads(quick, common)
