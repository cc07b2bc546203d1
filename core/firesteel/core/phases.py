"""The parts of a driver's commit of a batch, timed: what a sink framework spends where.

A sink framework times each part of its ``commit_batch`` with
``commit_metrics().phase(name)`` (the write-ahead-log sink: ``plan``, ``send``,
``record``, ``cleanup``; a two-phase-commit sink: ``publish``) and counts what it found
(``segments_pending``). :func:`firesteel.core.metrics.commit.measured_commit` opens the
:class:`CommitMetrics` a commit's parts go to and hands them to the batch's record;
outside it (a segment sent on an executor) they go to a throwaway one. Apart from the
metrics package, which imports the sink roles, so the roles can import this.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["CommitMetrics", "commit_metrics", "measuring"]


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
    """The running commit's metrics; outside a measured commit, a throwaway one."""
    return _CURRENT.get() or CommitMetrics()


@contextmanager
def measuring(metrics: CommitMetrics) -> Iterator[CommitMetrics]:
    """Make ``metrics`` the one :func:`commit_metrics` returns inside the block."""
    token = _CURRENT.set(metrics)
    try:
        yield metrics
    finally:
        _CURRENT.reset(token)
