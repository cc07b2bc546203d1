"""A wall clock set off for every Python process of a crash-test run: the job's driver and
the Python workers Spark starts, which inherit ``PYTHONPATH`` through the JVM.

:func:`clock_offset` returns the environment a :class:`~firesteel.testing.CrashHarness`
run is started with; the folder it puts first on ``PYTHONPATH`` holds a
``sitecustomize`` that shifts :func:`time.time` and :func:`time.time_ns` by
``FIRESTEEL_CLOCK_OFFSET`` seconds at interpreter start. That is the clock
firesteel's own code reads for wall time (write stamps, file names). The JVM's
clock is not shifted: Spark's batch timestamps and trigger timing stay real.
"""

from __future__ import annotations

import os
from pathlib import Path

CLOCK_ENV = "FIRESTEEL_CLOCK_OFFSET"
"""Seconds added to the wall clock of every Python process that imports ``sitecustomize``."""

HOOK_DIR = Path(__file__).parent / "hook"
"""The folder holding the ``sitecustomize`` module."""


def clock_offset(seconds: float) -> dict[str, str]:
    """The environment of a run whose Python processes see the wall clock off by ``seconds``."""
    path = os.environ.get("PYTHONPATH", "")
    return {
        CLOCK_ENV: repr(float(seconds)),
        "PYTHONPATH": os.pathsep.join(p for p in (str(HOOK_DIR), path) if p),
    }
