"""Logging inside Spark's Python workers, which start with logging unconfigured.

Spark forwards a Python worker's stderr to the driver's (local mode) or the
executor's log. Setting ``FIRESTEEL_LOG_LEVEL`` (e.g. ``INFO``) in the job's
environment makes firesteel's records appear there; without it only warnings
and errors do (Python's default).
"""

from __future__ import annotations

import logging
import os

LEVEL_ENV = "FIRESTEEL_LOG_LEVEL"


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
