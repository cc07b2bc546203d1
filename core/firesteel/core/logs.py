"""Logging inside Spark's Python workers, which start with logging unconfigured.

Spark forwards a Python worker's stderr to the driver's (local mode) or the
executor's log. Setting ``FIRESTEEL_LOG_LEVEL`` (e.g. ``INFO``) in the job's
environment makes firesteel's records appear there; without it only warnings
and errors do (Python's default). At ``DEBUG``, :func:`timed` adds one record
per step of a micro-batch (logger ``firesteel.timing``), which is how
``python -m benchmarks fixedcost`` splits a batch's time by phase.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

LEVEL_ENV = "FIRESTEEL_LOG_LEVEL"

TIMING = logging.getLogger("firesteel.timing")
TIMING_FORMAT = "timing %s %.3f ms at %.6f pid %d"
"""``timing <phase> <ms> ms at <epoch seconds when the step began> pid <process>``."""


def configure_worker_logging() -> None:
    """Attach a stderr handler to the ``firesteel`` logger once, at the requested level."""
    level = os.environ.get(LEVEL_ENV)
    root = logging.getLogger("firesteel")
    if not level or root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level.upper())


@contextmanager
def timed(phase: str) -> Iterator[None]:
    """Log at DEBUG (logger ``firesteel.timing``, :data:`TIMING_FORMAT`) how long the block
    took; free when DEBUG is off. ``phase`` names the step (``sink.commit``, ``kafka.flush``)."""
    if not TIMING.isEnabledFor(logging.DEBUG):
        yield
        return
    began, started = time.time(), time.perf_counter()
    try:
        yield
    finally:
        elapsed = (time.perf_counter() - started) * 1000
        TIMING.debug(TIMING_FORMAT, phase, elapsed, began, os.getpid())
