"""What a benchmark module declares: workloads measured beside their baseline in one run.

Each ``benchmarks/bench_<group>.py`` defines ``workloads(quick: bool) -> list[Workload]``.
The runner (``python -m benchmarks``) warms up, repeats, and reports the median
of each side and their ratio against the goal the issue set.

A module may also define ``setup(quick: bool) -> AbstractContextManager[object]``:
the runner enters it once before the group's first workload and exits it after
the last (start a broker there, shared by every workload of the group). A
single workload's own data or service goes in :attr:`Workload.setup` instead.

``workloads()`` is called before any setup is entered, so it must be cheap:
build the list and closures, start nothing. A module that cannot be imported
because an optional package is missing is reported as skipped with a pip
install hint (raise :class:`firesteel.core.errors.MissingDependencyError` to
word the hint yourself).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Figure:
    """One run's result when a side reports more than its headline figure.

    ``value`` is in the workload's ``unit``; ``extra`` holds secondary figures
    (e.g. ``{"MB/s": 212.0}``), reported beside it with their own median and spread.
    """

    value: float
    extra: Mapping[str, float] = field(default_factory=dict)
    note: str = ""
    """How this run was measured when it differs from the workload's rule (e.g. over a
    window because the side could not finish); the report prints it beside the side."""


Measure = Callable[[], "float | Figure"]
"""Runs one side once and returns its figure (a bare float or a :class:`Figure`)."""


def measured_once(measure: Measure) -> Measure:
    """``measure`` run on the first call only; later calls return that first figure.

    For quick runs, which prove that each path runs and measure nothing: a side
    that several workloads share then runs once, and its figure stands beside
    each of their baselines.
    """
    figures: list[float | Figure] = []

    def first() -> float | Figure:
        if not figures:
            figures.append(measure())
        return figures[0]

    return first


@dataclass(frozen=True)
class Workload:
    """One measured task, done by firesteel and by its baseline on the same data.

    The runner alternates the two sides (firesteel, baseline, firesteel, ...) so
    that a machine shared with other work slows both alike; ``warmup`` runs of
    each side are discarded, then ``repetitions`` runs of each are kept.
    """

    group: str
    """Chart/table group: ``files``, ``state``, ``kafka``..."""
    name: str
    """What is measured, e.g. ``parquet files -> files sink, 10M rows``."""
    unit: str
    """Unit of both figures, e.g. ``rows/s``; higher is better unless ``lower_is_better``."""
    baseline_name: str
    """What the baseline is, e.g. ``raw pyarrow``."""
    goal: float | None
    """Ratio firesteel/baseline the issue asks for (None: reported only).

    Met when the ratio is >= goal, or <= goal when ``lower_is_better``
    (e.g. latency: ``goal=1.5`` means at most 1.5x the baseline's latency).
    """
    firesteel: Measure
    """Runs the firesteel side once and returns its figure in ``unit``."""
    baseline: Measure
    """Runs the baseline once and returns its figure in ``unit``."""
    lower_is_better: bool = False
    repetitions: int = 3
    warmup: int = 1
    issue: str | None = None
    """Where the goal comes from, e.g. ``issue 2``; shown beside the goal."""
    setup: Callable[[], AbstractContextManager[object]] | None = None
    """Entered once before this workload's warm-up and exited after its last repetition."""

    def __post_init__(self) -> None:
        if self.repetitions < 1 or self.warmup < 0:
            msg = (
                f"workload {self.group}/{self.name}: repetitions must be >= 1 and warmup >= 0, "
                f"got {self.repetitions} and {self.warmup}"
            )
            raise ValueError(msg)
