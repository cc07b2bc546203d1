"""Python's cyclic garbage collector kept off the state a worker holds between tasks.

An operator task allocates per key and window while the state it holds, restored or
built, is millions of long-lived objects; the heap backend keeps them in the worker
between tasks. Each full collection walks all of them again: during a task (half of a
session-window task's time at 20k keys), and after it, where PySpark's daemon runs
``gc.collect()`` after every task of a reused worker (a quarter of the Python time of a
window job's workers). So around a task (:func:`operator_task`):

* the collector is paused while it runs (Mercurial's ``nogc``); reference counting still
  frees what the task drops;
* when it ends, the cycles among the objects the task made are collected (a young
  collection), and everything left is frozen (``gc.freeze``): later collections, PySpark's
  included, skip it;
* every :data:`FULL_EVERY` tasks of a process, the frozen objects are collected with the
  rest (a full collection), so a cycle an old object joined waits at most that many tasks.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

FULL_EVERY = 10
"""Operator tasks of a process between two full collections."""

_tasks = {"run": 0}
"""Operator tasks this process ran (a dict so the functions below need no ``global``)."""


@contextlib.contextmanager
def operator_task() -> Iterator[None]:
    """Around one operator task: the collector paused inside, old objects frozen after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        _tasks["run"] += 1
        if _tasks["run"] % FULL_EVERY == 0:
            gc.unfreeze()
            gc.collect()
        else:
            gc.collect(1)
        gc.freeze()
        if enabled:
            gc.enable()
