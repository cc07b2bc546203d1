"""What one write task measures, carried to the driver on its vote.

A sink task runs inside :func:`measured_write`, which counts the rows and Arrow
bytes handed to the sink and the task's write time, and opens a
:class:`TaskMetrics` that connector code reaches through :func:`task_metrics`
to count what only it knows (records skipped, retries, transactions fenced).
The counts travel on the task's :class:`~firesteel.core.sink.Vote`, so the
driver sees exactly the tasks whose votes it commits: a task attempt that
failed, or a batch that was aborted, is never counted.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from firesteel.core.context import TaskScope
from firesteel.core.sink import Sink, Vote

__all__ = ["TaskMetrics", "measured_write", "task_metrics"]

ROWS = "input_rows"
BYTES = "input_bytes"
WRITE_SECONDS = "write_seconds"
"""The measures every task carries, beside the counters connectors add."""


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
    vote.metrics = {**metrics.counters, **totals, WRITE_SECONDS: clock() - started}
    return vote
