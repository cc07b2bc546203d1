"""What one write task measures, carried to the driver on its vote.

A sink task runs inside :func:`measured_write`, which counts the rows and Arrow
bytes handed to the sink and the task's write time, and opens a
:class:`TaskMetrics` that connector code reaches through :func:`task_metrics`
to count what only it knows (records skipped, retries, transactions fenced).
The counts travel on the task's :class:`~firesteel.core.sink.Vote`, so the
driver sees exactly the tasks whose votes it commits: a task attempt that
failed, or a batch that was aborted, is never counted.

An operator that runs earlier in the same Spark task, in another Python worker (the
stateful operator's ``mapInArrow`` feeding the sink), hands its figures over with
:func:`hand_over`: a small file on the executor's local disk, named by query, partition
and operator and stamped with Spark's task attempt id, which the sink's task picks up
once its input ended (the operator's last step, so its figures are written by then) and
adds to its vote as ``operator:<name>:<figure>``. Figures of an operator separated from
the sink by a shuffle are in another task and not picked up. A file is needed only
within its task, so the folders go: a query's when it stops (the driver's listener,
:func:`remove_handovers`, on the driver's disk, which local mode's executors share) and,
on every machine, those no task touched for :data:`HANDOVER_MAX_AGE_SECONDS` when a Python
worker hands its first figures over (:func:`sweep_handovers`).
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
    "OPERATOR_PREFIX",
    "TaskMetrics",
    "hand_over",
    "measured_write",
    "remove_handovers",
    "sweep_handovers",
    "task_metrics",
]

logger = logging.getLogger(__name__)

ROWS = "input_rows"
BYTES = "input_bytes"
WRITE_SECONDS = "write_seconds"
"""The measures every task carries, beside the counters connectors add."""
OPERATOR_PREFIX = "operator:"
"""Vote metrics ``operator:<name>:<figure>`` come from an operator of the same task."""
HANDOVER_DIR = "firesteel-task-metrics"
HANDOVER_MAX_AGE_SECONDS = 24 * 3600.0
"""A hand-over folder no task touched for this long belongs to a query that stopped (or
runs no batch): :func:`sweep_handovers` removes it."""
_SWEPT: list[bool] = []
"""Non-empty once this process swept (:func:`hand_over` sweeps at its first call)."""


@dataclass
class TaskMetrics:
    """Counters of one write task, by name (``records_skipped``, ``commit_retries``, ...)."""

    counters: dict[str, float] = field(default_factory=dict)

    def count(self, name: str, value: float = 1) -> None:
        """Add ``value`` to counter ``name``; names are snake_case, in the unit they count."""
        self.counters[name] = self.counters.get(name, 0) + value


_CURRENT: contextvars.ContextVar[TaskMetrics | None] = contextvars.ContextVar(
    "firesteel_task_metrics", default=None
)


def task_metrics() -> TaskMetrics:
    """The running write task's metrics; outside a measured task, a throwaway one."""
    return _CURRENT.get() or TaskMetrics()


def _counted(
    batches: Iterator[pa.RecordBatch], totals: dict[str, float]
) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        totals[ROWS] += batch.num_rows
        totals[BYTES] += batch.nbytes
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


def hand_over(scope: TaskScope, operator: str, figures: dict[str, float]) -> None:
    """Leave ``figures`` of ``operator`` for the sink running later in this Spark task.

    One file per query, partition and operator, replaced every batch, so the folder
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
        partial = folder / f".{operator}.{attempt}"
        partial.write_text(content)
        os.replace(partial, folder / f"{operator}.json")
    except OSError as exc:
        logger.warning("metrics: figures of operator %s not handed over: %s", operator, exc)


def _taken_over(scope: TaskScope) -> dict[str, float]:
    """The figures operators of this very task attempt handed over, as vote metrics."""
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
        if content.get("task") != attempt:
            continue
        operator = path.name.removesuffix(".json")
        for figure, value in content["figures"].items():
            found[f"{OPERATOR_PREFIX}{operator}:{figure}"] = value
    return found


def measured_write(
    sink: Sink,
    scope: TaskScope,
    batches: Iterator[pa.RecordBatch],
    clock: Callable[[], float] = time.perf_counter,
) -> Vote:
    """Run ``sink.write_partition`` for one task, measured; the vote carries the figures."""
    totals = {ROWS: 0.0, BYTES: 0.0}
    metrics = TaskMetrics()
    token = _CURRENT.set(metrics)
    started = clock()
    try:
        vote = sink.write_partition(scope, _counted(batches, totals))
    finally:
        _CURRENT.reset(token)
    finished = clock()
    vote.metrics = {
        **metrics.counters,
        **totals,
        WRITE_SECONDS: finished - started,
        **_taken_over(scope),
    }
    return vote
