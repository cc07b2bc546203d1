"""What the driver's commit of a batch measures: the time of each of its parts.

:func:`~firesteel.core.spark.writer.commit_batch` runs a sink's ``commit_batch`` inside
:func:`measured_commit`; the sink frameworks time their parts through
:func:`commit_metrics` (the write-ahead-log sink: ``plan``, ``send``, ``record``,
``cleanup``; a two-phase-commit sink: ``publish``) and count what they found
(``segments_pending``). A crash inside the commit makes Spark commit the batch again;
the batch's record then holds what the last commit, the one that completed, measured:
these figures count that attempt, which after a crash has less left to do.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from firesteel.core.sink import Sink, Vote

__all__ = ["CommitMetrics", "commit_metrics", "measured_commit"]


@dataclass
class CommitMetrics:
    """Seconds per part of one commit of a batch, and the counters of its sink."""

    phases: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    clock: Callable[[], float] = time.perf_counter

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Add the time spent inside the block to phase ``name`` (snake_case)."""
        started = self.clock()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + self.clock() - started

    def count(self, name: str, value: float = 1) -> None:
        """Add ``value`` to counter ``name``."""
        self.counters[name] = self.counters.get(name, 0) + value


_CURRENT: contextvars.ContextVar[CommitMetrics | None] = contextvars.ContextVar(
    "firesteel_commit_metrics", default=None
)


def commit_metrics() -> CommitMetrics:
    """The running commit's metrics; outside a measured commit (a segment sent on an
    executor), a throwaway one."""
    return _CURRENT.get() or CommitMetrics()


def measured_commit(
    sink: Sink,
    batch_id: int,
    votes: Sequence[Vote],
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[CommitMetrics, float]:
    """Run ``sink.commit_batch``, measured; its metrics and its seconds."""
    metrics = CommitMetrics(clock=clock)
    token = _CURRENT.set(metrics)
    started = clock()
    try:
        sink.commit_batch(batch_id, votes)
    finally:
        _CURRENT.reset(token)
    return metrics, clock() - started
