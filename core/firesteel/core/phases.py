"""The parts of a driver's commit of a batch, timed: what a sink framework spends where.

A sink framework times each part of its ``commit_batch`` as a step with a phase,
``timed(step, phase=name)`` (:func:`firesteel.core.logs.timed`, which also logs the
step at DEBUG; the write-ahead-log sink: ``plan``, ``send``, ``record``, ``cleanup``;
a two-phase-commit sink: ``publish``), and counts what it found
(``segments_pending``). :func:`firesteel.core.metrics.commit.measured_commit` opens
the :class:`CommitMetrics` a commit's parts go to and hands them to the batch's
record; outside it (a segment sent on an executor) they go to a throwaway one. Apart
from the metrics package, which imports the sink roles, so the roles can import this.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["CommitMetrics", "commit_metrics", "measuring"]


@dataclass
class CommitMetrics:
    """Seconds per part of one commit of a batch, and the counters of its sink."""

    phases: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)

    def add(self, phase: str, seconds: float) -> None:
        """Add ``seconds`` to phase ``phase`` (snake_case); :func:`firesteel.core.logs.timed`
        is what calls it."""
        self.phases[phase] = self.phases.get(phase, 0.0) + seconds

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
