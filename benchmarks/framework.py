"""What a benchmark module declares: workloads measured beside their baseline in one run.

Each ``benchmarks/bench_<group>.py`` defines ``workloads(quick: bool) -> list[Workload]``.
The runner (``python -m benchmarks``) warms up, repeats, and reports the median
of each side and their ratio against the goal the issue set.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    """One measured task, done by firesteel and by its baseline on the same data."""

    group: str
    """Chart/table group: ``files``, ``state``, ``kafka``..."""
    name: str
    """What is measured, e.g. ``parquet files -> files sink, 10M rows``."""
    unit: str
    """Unit of both figures, e.g. ``rows/s``; higher is better unless ``lower_is_better``."""
    baseline_name: str
    """What the baseline is, e.g. ``raw pyarrow``."""
    goal: float | None
    """Ratio firesteel/baseline the issue asks for (None: reported only)."""
    firesteel: Callable[[], float]
    """Runs the firesteel side once and returns its figure in ``unit``."""
    baseline: Callable[[], float]
    """Runs the baseline once and returns its figure in ``unit``."""
    lower_is_better: bool = False
    repetitions: int = 3
    warmup: int = 1
