"""CPU time used by this process and everything it started (the JVM, Python workers).

Wall-clock figures on a machine shared with other work swing with its load;
CPU seconds barely do, so benchmarks report them beside throughput. Spark's
JVM and Python workers are descendants of the benchmark process, so a run's
CPU is the growth of the whole process tree's CPU over the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psutil

JVM = "JVM CPU s"
PYTHON_WORKERS = "Python worker CPU s"
DRIVER = "driver CPU s"
S3_SERVER = "S3 server CPU s"
"""moto's server process, which the object-store benchmarks start as a child."""
TOTAL = "CPU s"


def _kind(process: psutil.Process, root: int) -> str:
    if process.pid == root:
        return DRIVER
    name = process.name()
    if name.startswith("java"):
        return JVM
    if name.startswith("python"):
        return PYTHON_WORKERS
    if name.startswith("moto"):
        return S3_SERVER
    return "other CPU s"


def _tree() -> dict[tuple[int, float], tuple[str, float]]:
    """CPU seconds so far of every live process in the tree, keyed by (pid, start time).

    A process's own CPU plus that of its children it has already reaped, so a
    Python worker that exited during the run still counts (in its parent).
    """
    root = psutil.Process()
    seen: dict[tuple[int, float], tuple[str, float]] = {}
    for process in [root, *root.children(recursive=True)]:
        try:
            with process.oneshot():
                times = process.cpu_times()
                key = (process.pid, process.create_time())
                used = times.user + times.system + times.children_user + times.children_system
                seen[key] = (_kind(process, root.pid), used)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return seen


class Usage(dict[str, float]):
    """CPU seconds by kind (``JVM CPU s``, ``Python worker CPU s``, ...) and ``CPU s`` in all."""


@contextmanager
def measure() -> Iterator[Usage]:
    """CPU seconds the process tree used inside the ``with`` block, filled in at its end.

    A process that started and ended inside the block without being reaped by
    a process of the tree is missed; Spark reaps its workers, so that is rare.
    """
    before = _tree()
    usage = Usage()
    yield usage
    for key, (kind, used) in _tree().items():
        _, start = before.get(key, (kind, 0.0))
        usage[kind] = usage.get(kind, 0.0) + max(used - start, 0.0)
    usage[TOTAL] = sum(v for k, v in usage.items() if k != TOTAL)
