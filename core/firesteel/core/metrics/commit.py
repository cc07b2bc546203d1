"""What the driver's commit of a batch measures: the time of each of its parts.

:func:`~firesteel.core.spark.writer.commit_batch` runs a sink's ``commit_batch`` inside
:func:`measured_commit`; the sink frameworks time their parts and count what they found
through :func:`~firesteel.core.logs.timed` and :func:`~firesteel.core.phases.commit_metrics`
(see :mod:`firesteel.core.phases`).
A crash inside the commit makes Spark commit the batch again; the batch's record then
holds what the last commit, the one that completed, measured: these figures count that
attempt, which after a crash has less left to do.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from firesteel.core.phases import CommitMetrics, commit_metrics, measuring

if TYPE_CHECKING:
    from firesteel.core.sink import Sink, Vote

__all__ = ["CommitMetrics", "commit_metrics", "measured_commit"]


def measured_commit(
    sink: Sink,
    batch_id: int,
    votes: Sequence[Vote],
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[CommitMetrics, float]:
    """Run ``sink.commit_batch``, measured; its metrics and its seconds."""
    metrics = CommitMetrics()
    started = clock()
    with measuring(metrics):
        sink.commit_batch(batch_id, votes)
    return metrics, clock() - started
