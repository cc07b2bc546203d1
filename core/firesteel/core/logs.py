"""Logging inside Spark's Python workers, which start with logging unconfigured.

Spark forwards a Python worker's stderr to the driver's (local mode) or the
executor's log. Setting ``FIRESTEEL_LOG_LEVEL`` (e.g. ``INFO``) in the job's
environment makes firesteel's records appear there; without it only warnings
and errors do (Python's default). :func:`timed` times the steps of a micro-batch,
once for both of their readers: at ``DEBUG`` it adds one record per step (logger
``firesteel.timing``), which is how ``python -m benchmarks fixedcost`` splits a
batch's time by phase, and a step of a sink's commit named with a ``phase`` adds its
seconds to the batch's record (:mod:`firesteel.core.phases`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from firesteel.core.phases import commit_metrics

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
def timed(step: str, phase: str | None = None) -> Iterator[None]:
    """Time the block as step ``step`` of a micro-batch (``sink.commit``, ``kafka.flush``).

    At DEBUG, log it (logger ``firesteel.timing``, :data:`TIMING_FORMAT`). With ``phase``
    (snake_case: ``plan``, ``send``), also add its seconds to that part of the running
    commit's metrics (:func:`~firesteel.core.phases.commit_metrics`), which the batch's
    record keeps. Free when DEBUG is off and no ``phase`` is given.
    """
    logs = TIMING.isEnabledFor(logging.DEBUG)
    if not logs and phase is None:
        yield
        return
    began, started = time.time(), time.perf_counter()
    try:
        yield
    finally:
        seconds = time.perf_counter() - started
        if phase is not None:
            commit_metrics().add(phase, seconds)
        if logs:
            TIMING.debug(TIMING_FORMAT, step, seconds * 1000, began, os.getpid())
