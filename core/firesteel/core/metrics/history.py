"""The per-batch record of a sink's committed work, kept beside Spark's checkpoint.

After a sink committed batch N, and before Spark writes ``commits/N``, the driver
writes ``<checkpoint>/firesteel/metrics/<sink id>/<N>.json``: when the batch
committed, how many tasks voted, the rows and Arrow bytes they were handed, the
slowest task's read, process and write times (:mod:`firesteel.core.metrics.task` says
what each phase holds), the commit's time and that of each of its parts
(:mod:`firesteel.core.metrics.commit`), every counter the tasks added, the figures of
the stateful operators that fed the sink in the same tasks (snapshot time and bytes,
state size: :func:`firesteel.core.metrics.task.hand_over`), and the running totals
through batch N (those of batch N - 1 plus this batch's), histograms of the phase
durations included.

A crash before ``commits/N`` makes Spark commit batch N again, which writes the
record again from the same input, so the history holds every committed batch
once, and its totals count committed work only, however often a batch ran. Figures
that describe one attempt rather than committed work say so: the commit's parts (the
last, completed, commit of the batch) and an operator's snapshot (the attempt whose
vote was committed). The last :data:`RETAINED` records are kept, as Spark keeps its own
progress.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from pyarrow import fs

from firesteel.core import layout
from firesteel.core.durable import read_record, write_record
from firesteel.core.folder import Folder
from firesteel.core.metrics.commit import CommitMetrics
from firesteel.core.metrics.task import (
    BYTES,
    MAX_PREFIX,
    OPERATOR_PREFIX,
    PHASES,
    PROCESS_SECONDS,
    READ_SECONDS,
    ROWS,
    WRITE_SECONDS,
)
from firesteel.core.sink import Vote

__all__ = [
    "BUCKETS",
    "RETAINED",
    "BatchRecord",
    "batch_record",
    "batch_records",
    "read_history",
    "record_batch",
]

logger = logging.getLogger(__name__)

KIND = "firesteel-batch-metrics"
VERSION = 3
"""2 added the commit's parts, the operators' figures and the phase histograms; 3 the read
and process phases (and the write phase became the writer's own time, without the time it
waited for its input), and the tasks' maxima."""
RETAINED = 100
"""Batch records kept per sink; older ones are deleted as new ones are written."""
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Upper bounds (seconds) of the phase histograms' buckets; a last one is unbounded."""
MAXED = ("seconds",)
"""Operator figures ending so are the slowest task's, not a sum over tasks."""


@dataclass(frozen=True)
class BatchRecord:
    """One committed batch of one sink (see the module docs)."""

    sink_id: str
    batch: int
    committed_at: float
    """Seconds since the epoch when the sink's commit returned."""
    tasks: int
    input_rows: int
    input_bytes: int
    write_seconds: float
    """The slowest task's own time in the sink's writer (the batch waits for it)."""
    commit_seconds: float
    counters: dict[str, float] = field(default_factory=dict)
    """Every counter the batch's tasks added, summed."""
    totals: dict[str, float] = field(default_factory=dict)
    """``input_rows``, ``input_bytes``, ``batches`` and every counter, through this batch."""
    commit_phases: dict[str, float] = field(default_factory=dict)
    """Seconds of each part of the driver's commit, as the last commit of the batch spent
    them (``send``, ``record``, ``publish``...: :mod:`firesteel.core.metrics.commit`)."""
    commit_counters: dict[str, float] = field(default_factory=dict)
    """What that commit counted (``segments_pending``: write-ahead segments it had to send)."""
    operators: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per stateful operator feeding the sink in the same tasks: ``snapshot_seconds`` (the
    slowest task's; ``snapshot_blocked_seconds`` the part its task waited for, the rest
    overlapped with handing the output on), ``snapshot_bytes`` written, and what its
    backend tells of the state (``state_bytes``, ``state_entries``, RocksDB's
    ``state_entries_estimate``), summed over tasks."""
    histograms: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per phase (``read``, ``process``, ``write``, ``commit``, ``commit_<part>``,
    ``snapshot``): its seconds in every committed batch through this one, as cumulative
    counts at or below each of :data:`BUCKETS` (and one for all), their ``sum`` and
    ``count``."""
    read_seconds: float | None = None
    """The slowest task's time inside its source's reader; ``None`` when no source was read
    in the sink's tasks (a shuffle between them, or a source that is not firesteel's)."""
    maxima: dict[str, float] = field(default_factory=dict)
    """The largest value of each maximum the batch's tasks kept
    (:meth:`~firesteel.core.metrics.task.TaskMetrics.maximum`): the Kafka source's
    ``oldest_record_age_seconds``, how old the oldest record the batch read was when its
    task fetched it (Flink's ``currentFetchEventTimeLag``), where it was read in the sink's
    tasks."""
    process_seconds: float | None = None
    """The slowest task's time upstream of the writer that was neither the source's read nor
    an operator's snapshot (Spark's operators, user functions, a shuffle's fetch, a stateful
    operator's processing); ``None`` in records of version 2."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BatchRecord:
        return cls(**data)

    def phases(self) -> dict[str, float]:
        """This batch's seconds per phase, the keys of :attr:`histograms`."""
        found = {"write": self.write_seconds, "commit": self.commit_seconds}
        if self.read_seconds is not None:
            found["read"] = self.read_seconds
        if self.process_seconds is not None:
            found["process"] = self.process_seconds
        found.update({f"commit_{part}": s for part, s in self.commit_phases.items()})
        snapshots = [
            f["snapshot_seconds"] for f in self.operators.values() if "snapshot_seconds" in f
        ]
        if snapshots:
            found["snapshot"] = max(snapshots)
        return found


def _folder(checkpoint: str, sink_id: str) -> str:
    return layout.metrics(checkpoint, sink_id)


def batch_record(checkpoint: str, sink_id: str, batch: int) -> BatchRecord | None:
    """The record of ``batch``, or ``None`` when there is none."""
    try:
        content = read_record(f"{_folder(checkpoint, sink_id)}/{batch}.json", KIND, (1, 2, VERSION))
    except FileNotFoundError:
        return None
    return BatchRecord.from_json(content)


def _summed(votes: Sequence[Vote]) -> dict[str, float]:
    summed: dict[str, float] = {}
    for vote in votes:
        for name, value in vote.metrics.items():
            if name not in PHASES and not name.startswith((OPERATOR_PREFIX, MAX_PREFIX)):
                summed[name] = summed.get(name, 0) + value
    return summed


def _maxima(votes: Sequence[Vote]) -> dict[str, float]:
    maxima: dict[str, float] = {}
    for vote in votes:
        for name, value in vote.metrics.items():
            if name.startswith(MAX_PREFIX):
                figure = name.removeprefix(MAX_PREFIX)
                maxima[figure] = max(maxima.get(figure, value), value)
    return maxima


def _slowest(votes: Sequence[Vote], phase: str) -> float | None:
    """The slowest task's seconds in ``phase``, ``None`` when no task measured it."""
    measured = [v.metrics[phase] for v in votes if phase in v.metrics]
    return max(measured) if measured else None


def _operators(votes: Sequence[Vote]) -> dict[str, dict[str, float]]:
    operators: dict[str, dict[str, float]] = {}
    for vote in votes:
        for name, value in vote.metrics.items():
            if not name.startswith(OPERATOR_PREFIX):
                continue
            operator, figure = name.removeprefix(OPERATOR_PREFIX).rsplit(":", 1)
            figures = operators.setdefault(operator, {})
            if figure.endswith(MAXED):
                figures[figure] = max(figures.get(figure, 0.0), value)
            else:
                figures[figure] = figures.get(figure, 0) + value
    return operators


def _observed(
    histograms: dict[str, dict[str, Any]], phases: dict[str, float]
) -> dict[str, dict[str, Any]]:
    """``histograms`` with one more observation of each phase."""
    empty = {"buckets": [0] * (len(BUCKETS) + 1), "sum": 0.0, "count": 0}
    bounds = [*BUCKETS, float("inf")]
    updated = {}
    for phase, seconds in phases.items():
        before = histograms.get(phase, empty)
        updated[phase] = {
            "buckets": [n + (seconds <= b) for n, b in zip(before["buckets"], bounds, strict=True)],
            "sum": before["sum"] + seconds,
            "count": before["count"] + 1,
        }
    return {**histograms, **updated}


def record_batch(
    checkpoint: str,
    sink_id: str,
    batch: int,
    votes: Sequence[Vote],
    commit_seconds: float,
    *,
    commit: CommitMetrics | None = None,
) -> BatchRecord:
    """Write the record of committed ``batch`` (replacing one an earlier run wrote)."""
    summed = _summed(votes)
    counters = {k: v for k, v in summed.items() if k not in (ROWS, BYTES)}
    previous = batch_record(checkpoint, sink_id, batch - 1) if batch > 0 else None
    totals = dict(previous.totals) if previous is not None else {}
    for name, value in {**summed, "batches": 1}.items():
        totals[name] = totals.get(name, 0) + value
    commit = commit or CommitMetrics()
    record = BatchRecord(
        sink_id=sink_id,
        batch=batch,
        committed_at=time.time(),
        tasks=len(votes),
        input_rows=int(summed.get(ROWS, 0)),
        input_bytes=int(summed.get(BYTES, 0)),
        write_seconds=_slowest(votes, WRITE_SECONDS) or 0.0,
        commit_seconds=commit_seconds,
        counters=counters,
        totals=totals,
        commit_phases=dict(commit.phases),
        commit_counters=dict(commit.counters),
        operators=_operators(votes),
        read_seconds=_slowest(votes, READ_SECONDS),
        maxima=_maxima(votes),
        process_seconds=_slowest(votes, PROCESS_SECONDS) if votes else None,
    )
    before = previous.histograms if previous is not None else {}
    record = replace(record, histograms=_observed(before, record.phases()))
    folder = _folder(checkpoint, sink_id)
    write_record(f"{folder}/{batch}.json", KIND, VERSION, asdict(record))
    _forget_before(folder, batch - RETAINED + 1)
    return record


def _batches(fsys: fs.FileSystem, folder: str) -> list[int]:
    infos = fsys.get_file_info(fs.FileSelector(folder, allow_not_found=True))
    names = (info.base_name.removesuffix(".json") for info in infos)
    return sorted(int(name) for name in names if name.isdigit())


def _forget_before(folder: str, oldest_kept: int) -> None:
    records = Folder(folder)
    stale = f"{oldest_kept - 1}.json"
    # Only the one record that just fell out of the window: no listing per batch.
    if oldest_kept > 0 and records.exists(stale):
        records.delete(stale)


def _sinks(checkpoint: str) -> tuple[fs.FileSystem, list[fs.FileInfo]]:
    """The sinks' record folders of a query, by sink id."""
    metrics = Folder(layout.metrics(checkpoint))
    folders = [info for info in metrics.entries() if info.type == fs.FileType.Directory]
    return metrics.fs, sorted(folders, key=lambda info: info.base_name)


def batch_records(checkpoint: str, batch: int) -> dict[str, BatchRecord]:
    """The record of ``batch`` of every firesteel sink of a query that has one, by sink id."""
    _, sinks = _sinks(checkpoint)
    records = {sink.base_name: batch_record(checkpoint, sink.base_name, batch) for sink in sinks}
    return {sink: record for sink, record in records.items() if record is not None}


def read_history(checkpoint: str, last: int = RETAINED) -> dict[str, list[BatchRecord]]:
    """The last ``last`` batch records of every firesteel sink of a query, by sink id,
    oldest first."""
    fsys, sinks = _sinks(checkpoint)
    history = {}
    for sink in sinks:
        batches = _batches(fsys, sink.path)[-last:]
        records = [batch_record(checkpoint, sink.base_name, batch) for batch in batches]
        history[sink.base_name] = [r for r in records if r is not None]
    return history
