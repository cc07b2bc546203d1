"""A micro-batch's time split by phase: Spark's ``durationMs`` and firesteel's timing records.

Spark reports, per batch, ``latestOffset`` (asking the sources for their end),
``queryPlanning``, ``getBatch``, ``walCommit`` (writing ``offsets/N``),
``addBatch`` (the tasks and the sink's commit), ``commitOffsets`` (writing
``commits/N``) and ``triggerExecution`` (all of it). firesteel's processes, run
with ``FIRESTEEL_LOG_LEVEL=DEBUG``, log one record per step
(:func:`firesteel.core.logs.timed`, :data:`firesteel.core.logs.TIMING_FORMAT`):
each names its phase, its milliseconds, when it began and its process, so a
record belongs to the batch whose trigger window holds its start.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

SPARK_PHASES = (
    "latestOffset",
    "queryPlanning",
    "getBatch",
    "walCommit",
    "addBatch",
    "commitOffsets",
    "triggerExecution",
)
"""Spark's ``durationMs`` keys, in the order a batch runs them."""

TASK_PHASES = frozenset({"source.read", "sink.write"})
"""Phases that run in parallel tasks: a batch waits for the slowest, so the maximum counts."""

OURS = (
    "source.latest_offset",
    "source.report_latest_offset",
    "source.commit",
    "source.partitions",
    "writer.guarantee_check",
    "writer.prepare",
    "sink.write",
    "sink.commit",
    "sink.metrics_record",
)
"""firesteel's steps that a batch waits for one after another (``sink.write``, the slowest
write task, holds its task's ``source.read``); each ``source.*`` runs in the source's
runner, each ``writer.*`` where Spark builds the writer."""

FIRESTEEL = "firesteel's steps"
SPARK = "Spark's own (the rest)"
"""Per batch: the sum of :data:`OURS`, and ``triggerExecution`` less that sum: Spark's
logs, planning, task scheduling and the hand-over of rows and calls to Python processes."""

NEW_PROCESSES = "python processes started"
"""Per batch: firesteel processes that logged for the first time in it (a Python runner
or worker started for that batch, not kept from an earlier one)."""

_RECORD = re.compile(
    r"timing (?P<phase>\S+) (?P<ms>[0-9.]+) ms at (?P<at>[0-9.]+) pid (?P<pid>[0-9]+)"
)
_SLACK_S = 0.005
"""How far before Spark's trigger timestamp (whole milliseconds) a step may begin and still
belong to the batch. A window ends where ``triggerExecution`` does, exclusive: a batch
that overran its interval is followed at once by the next trigger, whose planning must
not count twice."""


@dataclass(frozen=True)
class Timing:
    """One timing record: ``phase`` took ``ms``, beginning at ``at`` (epoch s) in ``pid``."""

    phase: str
    ms: float
    at: float
    pid: int


def parse_timings(lines: Iterable[str]) -> list[Timing]:
    """Every timing record in ``lines`` (a job's stderr), in order."""
    found = []
    for line in lines:
        match = _RECORD.search(line)
        if match:
            found.append(
                Timing(match["phase"], float(match["ms"]), float(match["at"]), int(match["pid"]))
            )
    return found


def _epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def batch_phases(
    batches: Sequence[dict[str, Any]], timings: Sequence[Timing]
) -> list[dict[str, float]]:
    """Per batch (a job's ``batch`` events, in order): Spark's durations and firesteel's
    phases in ms (summed within the batch; :data:`TASK_PHASES` by their slowest), and
    :data:`NEW_PROCESSES`."""
    seen_pids: set[int] = set()
    out = []
    for batch in batches:
        durations = batch["durationMs"]
        start = _epoch(batch["timestamp"])
        end = start + durations["triggerExecution"] / 1000
        phases: dict[str, float] = {name: float(durations.get(name, 0)) for name in SPARK_PHASES}
        inside = [t for t in timings if start - _SLACK_S <= t.at < end]
        for timing in inside:
            if timing.phase in TASK_PHASES:
                phases[timing.phase] = max(phases.get(timing.phase, 0.0), timing.ms)
            else:
                phases[timing.phase] = phases.get(timing.phase, 0.0) + timing.ms
        phases[FIRESTEEL] = sum(phases.get(name, 0.0) for name in OURS)
        phases[SPARK] = phases["triggerExecution"] - phases[FIRESTEEL]
        pids = {t.pid for t in inside}
        phases[NEW_PROCESSES] = float(len(pids - seen_pids))
        seen_pids |= pids
        out.append(phases)
    return out


def medians(per_batch: Sequence[dict[str, float]]) -> dict[str, float]:
    """The median of each phase over the batches (a phase missing from a batch counts 0)."""
    names: list[str] = []
    for phases in per_batch:
        names += [name for name in phases if name not in names]
    return {
        name: statistics.median(phases.get(name, 0.0) for phases in per_batch) for name in names
    }
