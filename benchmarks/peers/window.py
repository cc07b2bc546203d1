"""A bounded job measured whole, or over a time window when it cannot finish within it.

A side too slow for the group's input (PyFlink's keyed count at 5M events ran at
under 1k events/s on this shared machine: hours) is not stopped by hand: the
group gives it a budget, and a job still running a budget after its first
committed output is measured over that window, from its committed output, and
said to be so. The window starts at the first committed output, so the job's
warm-up (its JVM, Python workers, first checkpoint) is left out of the rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.peers.job import Job, JobError

POLL_S = 0.5


@dataclass(frozen=True)
class Outcome:
    """What a windowed measurement saw."""

    rate: float
    """Events per second: of the whole run (ready to exit) or of the window."""
    finished: bool
    """Whether the job finished its input (then :attr:`rate` is of the whole run)."""
    window_s: float
    """Seconds the window lasted (0 when the job finished)."""
    in_window: int
    """Events committed within the window (0 when the job finished)."""


class FinishedLines:
    """Lines of the finished files under a folder, each file counted once.

    A name starting with ``.`` is an in-progress file (Flink's ``FileSink`` hides
    them until a checkpoint commits them); a finished file never changes, so it is
    read once however often the count is asked for.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._counted: dict[Path, int] = {}

    def __call__(self) -> int:
        if self.folder.exists():
            for path in self.folder.rglob("*"):
                if path in self._counted or path.name.startswith(".") or not path.is_file():
                    continue
                with path.open("rb") as lines:
                    self._counted[path] = sum(1 for _ in lines)
        return sum(self._counted.values())


def measure(
    job: Job, committed: Callable[[], int], events: int, budget_s: float, timeout_s: float
) -> Outcome:
    """Run ``job`` (entered and stopped here) on its ``events`` input.

    Finished within ``budget_s`` of its first committed output: the whole run's
    rate, from ready to exit, after checking ``committed()`` accounts for every
    event. Still running then: its committed events per second over that window,
    and it is stopped. ``timeout_s`` bounds the wait for ready and first output.
    """
    with job:
        job.wait_ready(timeout_s)
        assert job.ready is not None
        start: tuple[float, int] | None = None
        while job.running():
            now, seen = time.perf_counter(), committed()
            if start is None and seen > 0:
                start = (now, seen)
            elif start is not None and now - start[0] >= budget_s:
                window = now - start[0]
                return Outcome((seen - start[1]) / window, False, window, seen - start[1])
            if start is None and now - job.ready > timeout_s:
                msg = f"{job.command[:3]}: no committed output {timeout_s:g} s after ready"
                raise JobError(msg)
            time.sleep(POLL_S)
        ended = job.wait_exit(timeout_s)
    counted = committed()
    if counted != events:
        msg = f"{job.command[:3]}'s output accounts for {counted} events of {events}"
        raise JobError(msg)
    return Outcome(events / (ended - job.ready), True, 0.0, 0)
