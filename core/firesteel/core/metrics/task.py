"""What one write task measures, carried to the driver on its vote.

A sink task runs inside :func:`measured_write`, which counts the rows and Arrow
bytes handed to the sink and splits the task's time into its phases, and opens a
:class:`TaskMetrics` that connector code reaches through :func:`task_metrics`
to count what only it knows (records skipped, retries, transactions fenced).
The counts travel on the task's :class:`~firesteel.core.sink.Vote`, so the
driver sees exactly the tasks whose votes it commits: a task attempt that
failed, or a batch that was aborted, is never counted.

Spark runs a task's steps as one pipeline (the source's reader, Spark's own operators,
a stateful operator, the sink's writer, some in other Python workers), so the phases are
each step's own time, measured where it runs: *read* is the time spent inside the source's
reader (:func:`timed_iteration` around it, handed over as below), *write* the time inside
the sink's writer between asking for its input and being handed it, and *process* the
rest of the time the writer waited for its input, less read and the part of the operators'
snapshots the task waited for: Spark's operators, user functions, a shuffle's fetch, a
stateful operator's processing. Read is known only when the source's read ran in the
sink's task (no shuffle between them); otherwise the read was another task's, and the
record leaves it out. A firesteel source's reader hands its read over in every streaming
task (one small local file per task, replaced every batch), whatever the sink.

An operator or a source's reader that runs earlier in the same Spark task, in another
Python worker (the stateful operator's ``mapInArrow``, the source's read, feeding the
sink), hands its figures over with :func:`hand_over`: a small file on the executor's
local disk, named by query, partition and operator (or source) and stamped with Spark's
task attempt id, which the sink's task picks up once its input ended (their last step,
so their figures are written by then) and adds to its vote as
``operator:<name>:<figure>`` (a source's read time and rows as ``read_seconds``,
``read_rows`` and ``read_bytes``). Figures of an operator separated from the sink by a
shuffle are in another task and not picked up. A file is needed only within its task, so
the folders go: a query's when it stops (the driver's listener,
:func:`remove_handovers`, on the driver's disk, which local mode's executors share) and,
on every machine, those no task touched for :data:`HANDOVER_MAX_AGE_SECONDS` when a
Python worker hands its first figures over (:func:`sweep_handovers`).
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from firesteel.core.context import TaskScope
from firesteel.core.sink import Sink, Vote

__all__ = [
    "MAX_PREFIX",
    "OPERATOR_PREFIX",
    "SNAPSHOT_BLOCKED_SECONDS",
    "TaskMetrics",
    "hand_over",
    "measured_read",
    "measured_write",
    "remove_handovers",
    "sweep_handovers",
    "task_metrics",
    "timed_iteration",
]

logger = logging.getLogger(__name__)

ROWS = "input_rows"
BYTES = "input_bytes"
WRITE_SECONDS = "write_seconds"
PROCESS_SECONDS = "process_seconds"
READ_SECONDS = "read_seconds"
"""The measures every task carries, beside the counters connectors add (read only where
a source's reader ran in the task)."""
PHASES = (READ_SECONDS, PROCESS_SECONDS, WRITE_SECONDS)
"""The task's phases: each batch keeps its slowest task's, not a sum over tasks."""
SNAPSHOT_BLOCKED_SECONDS = "snapshot_blocked_seconds"
"""An operator's figure: the part of its snapshot its task waited for (the rest of
``snapshot_seconds`` overlapped with handing its last output on)."""
READ_ROWS = "read_rows"
READ_BYTES = "read_bytes"
MAX_PREFIX = "max:"
"""Vote metrics ``max:<name>`` are a task's maxima: a batch keeps the largest, not a sum."""
OPERATOR_PREFIX = "operator:"
"""Vote metrics ``operator:<name>:<figure>`` come from an operator of the same task."""
SOURCE_ROLE = "source"
"""The role of a source's hand-over (:func:`hand_over`); operators are the default."""
HANDOVER_DIR = "firesteel-task-metrics"
HANDOVER_MAX_AGE_SECONDS = 24 * 3600.0
"""A hand-over folder no task touched for this long belongs to a query that stopped (or
runs no batch): :func:`sweep_handovers` removes it."""
_SWEPT: list[bool] = []
"""Non-empty once this process swept (:func:`hand_over` sweeps at its first call)."""


@dataclass
class TaskMetrics:
    """Counters of one task, by name (``records_skipped``, ``commit_retries``, ...), and
    maxima (``oldest_record_age_seconds``: the largest value the task saw)."""

    counters: dict[str, float] = field(default_factory=dict)
    maxima: dict[str, float] = field(default_factory=dict)

    def count(self, name: str, value: float = 1) -> None:
        """Add ``value`` to counter ``name``; names are snake_case, in the unit they count."""
        self.counters[name] = self.counters.get(name, 0) + value

    def maximum(self, name: str, value: float) -> None:
        """Keep ``value`` as ``name`` if it is the largest so far; a batch keeps the largest
        of its tasks' (:attr:`~firesteel.core.metrics.history.BatchRecord.maxima`)."""
        self.maxima[name] = max(self.maxima.get(name, value), value)

    def figures(self) -> dict[str, float]:
        """Counters and maxima as vote figures: maxima under :data:`MAX_PREFIX`."""
        return {**self.counters, **{f"{MAX_PREFIX}{k}": v for k, v in self.maxima.items()}}


_CURRENT: contextvars.ContextVar[TaskMetrics | None] = contextvars.ContextVar(
    "firesteel_task_metrics", default=None
)


def task_metrics() -> TaskMetrics:
    """The running task's metrics (a sink's write, or a firesteel source's read:
    :func:`measured_read`); outside a measured task, a throwaway one."""
    return _CURRENT.get() or TaskMetrics()


def timed_iteration(
    batches: Iterator[pa.RecordBatch],
    totals: dict[str, float],
    clock: Callable[[], float] = time.perf_counter,
) -> Iterator[pa.RecordBatch]:
    """``batches`` unchanged, adding to ``totals`` their ``rows``, Arrow ``bytes`` and the
    ``seconds`` spent inside ``batches`` producing them (not the time their consumer holds
    each batch): a reader's own time, or the time a writer waited for its input. The three
    keys are in ``totals`` (0 where absent) before the first batch is asked for."""
    for key in ("rows", "bytes", "seconds"):
        totals.setdefault(key, 0.0)
    return _timed(iter(batches), totals, clock)


def _timed(
    batches: Iterator[pa.RecordBatch], totals: dict[str, float], clock: Callable[[], float]
) -> Iterator[pa.RecordBatch]:
    while True:
        started = clock()
        try:
            batch = next(batches)
        except StopIteration:
            totals["seconds"] += clock() - started
            return
        totals["seconds"] += clock() - started
        totals["rows"] += batch.num_rows
        totals["bytes"] += batch.nbytes
        yield batch


def _task_attempt() -> int | None:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.taskAttemptId() if context is not None else None


def _handover_root() -> Path:
    return Path(tempfile.gettempdir()) / HANDOVER_DIR


def _handover_folder(scope: TaskScope) -> Path:
    query = scope.query_id or "no-query"
    return _handover_root() / query / str(scope.partition_id)


def remove_handovers(query_id: str) -> None:
    """Remove the hand-over folders of ``query_id`` on this machine (it stopped)."""
    shutil.rmtree(_handover_root() / query_id, ignore_errors=True)


def _newest_change(folder: Path) -> float:
    """The latest modification under ``folder`` (its partitions' folders and files)."""
    stamps = [folder.stat().st_mtime]
    for path in folder.rglob("*"):
        try:
            stamps.append(path.stat().st_mtime)
        except FileNotFoundError:
            continue  # replaced by a task meanwhile: it is being used
    return max(stamps)


def sweep_handovers(
    max_age_seconds: float = HANDOVER_MAX_AGE_SECONDS, now: float | None = None
) -> list[str]:
    """Remove the hand-over folders of every query none of whose tasks touched them for
    ``max_age_seconds``; returns their query ids. A file matters only inside its task, so
    a folder idle that long has none in use."""
    root = _handover_root()
    if not root.is_dir():
        return []
    now = time.time() if now is None else now
    removed = []
    for folder in root.iterdir():
        try:
            idle = now - _newest_change(folder) > max_age_seconds
        except FileNotFoundError:
            continue  # removed by another process meanwhile
        if idle:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder.name)
    if removed:
        logger.info("metrics: removed the hand-over folders of stopped queries %s", removed)
    return removed


def hand_over(
    scope: TaskScope, operator: str, figures: dict[str, float], role: str = "operator"
) -> None:
    """Leave ``figures`` of ``operator`` (of a source's reader with ``role="source"``: its
    ``read_seconds``, ``read_rows`` and ``read_bytes``) for the sink running later in this
    Spark task.

    One file per query, partition, role and name, replaced every batch, so the folder
    stays as small as the queries an executor runs. Metrics never fail a task: a file
    that cannot be written is logged and skipped.
    """
    attempt = _task_attempt()
    if attempt is None:
        return
    if not _SWEPT:
        _SWEPT.append(True)
        try:
            sweep_handovers()
        except OSError as exc:
            logger.warning("metrics: old hand-over folders not swept: %s", exc)
    folder = _handover_folder(scope)
    content = json.dumps({"task": attempt, "batch": scope.batch_id, "figures": figures})
    try:
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{role}.{operator}.{attempt}"
        partial.write_text(content)
        os.replace(partial, folder / f"{role}.{operator}.json")
    except OSError as exc:
        logger.warning("metrics: figures of operator %s not handed over: %s", operator, exc)


def _taken_over(scope: TaskScope) -> dict[str, float]:
    """The figures operators and sources' readers of this very task attempt handed over,
    as vote metrics: an operator's under its name, the sources' summed."""
    attempt = _task_attempt()
    folder = _handover_folder(scope)
    if attempt is None or not folder.is_dir():
        return {}
    found: dict[str, float] = {}
    for path in folder.glob("*.json"):
        try:
            content = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # another task's file being replaced, or gone: not this task's
        stem = path.name.removesuffix(".json")
        if content.get("task") != attempt or "." not in stem:
            continue  # another attempt's, or written by a version before roles
        role, name = stem.split(".", 1)
        for figure, value in content["figures"].items():
            if role == SOURCE_ROLE and figure.startswith(MAX_PREFIX):
                found[figure] = max(found.get(figure, value), value)
            elif role == SOURCE_ROLE:
                found[figure] = found.get(figure, 0.0) + value
            else:
                found[f"{OPERATOR_PREFIX}{name}:{figure}"] = value
    return found


def _phases(wall: float, waited: float, taken: dict[str, float]) -> dict[str, float]:
    """The task's phases (module docs) from its wall time in the sink, the part of it spent
    waiting for input, and what the task's sources and operators handed over."""
    snapshots = sum(
        value
        for name, value in taken.items()
        if name.startswith(OPERATOR_PREFIX) and name.endswith(f":{SNAPSHOT_BLOCKED_SECONDS}")
    )
    read = taken.get(READ_SECONDS)
    upstream = waited - (read or 0.0) - snapshots
    phases = {WRITE_SECONDS: max(wall - waited, 0.0), PROCESS_SECONDS: max(upstream, 0.0)}
    if read is not None:
        phases[READ_SECONDS] = read
    return phases


def measured_write(
    sink: Sink,
    scope: TaskScope,
    batches: Iterator[pa.RecordBatch],
    clock: Callable[[], float] = time.perf_counter,
) -> Vote:
    """Run ``sink.write_partition`` for one task, measured; the vote carries the figures."""
    input_: dict[str, float] = {}
    metrics = TaskMetrics()
    token = _CURRENT.set(metrics)
    started = clock()
    try:
        vote = sink.write_partition(scope, timed_iteration(batches, input_, clock))
    finally:
        _CURRENT.reset(token)
    wall = clock() - started
    taken = _taken_over(scope)
    vote.metrics = {
        **metrics.figures(),
        ROWS: input_["rows"],
        BYTES: input_["bytes"],
        **{name: value for name, value in taken.items() if name != READ_SECONDS},
        **_phases(wall, input_["seconds"], taken),
    }
    return vote


def measured_read(
    scope: TaskScope | None, source: str, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``batches`` of ``source``'s reader, timed and counted (:func:`timed_iteration`), with
    a :class:`TaskMetrics` the reader reaches through :func:`task_metrics`; once they end,
    the figures are handed over to the sink of this task (no scope: not a streaming task,
    nothing handed over)."""
    read: dict[str, float] = {}
    metrics = TaskMetrics()
    token = _CURRENT.set(metrics)
    try:
        yield from timed_iteration(batches, read)
    finally:
        _CURRENT.reset(token)
    if scope is not None:
        figures = {
            READ_SECONDS: read["seconds"],
            READ_ROWS: read["rows"],
            READ_BYTES: read["bytes"],
        }
        hand_over(scope, source, {**figures, **metrics.figures()}, SOURCE_ROLE)
