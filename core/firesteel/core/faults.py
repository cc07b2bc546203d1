"""Fault injection points, used by the crash-test harness to kill a job at an exact step.

Library code calls :func:`fault_point` at each step of the commit protocol. It
does nothing unless the environment variable ``FIRESTEEL_FAULT`` names that
point, as ``point``, ``point@batch`` or ``point@batch:partition`` (several,
comma-separated). A matching point kills with SIGKILL, as a crash would:

* ``FIRESTEEL_FAULT_KILL=job`` (default): the process group in
  ``FIRESTEEL_FAULT_PGID`` (the job the harness started: driver and JVM) and
  the caller's own process group (Spark's Python workers);
* ``FIRESTEEL_FAULT_KILL=process``: only the calling process, which Spark sees
  as a failed task and retries.

``FIRESTEEL_FAULT_DIR`` names a folder of markers so each point fires once,
even when Spark retries the task that hit it.

The named points are listed in :data:`POINTS`.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

logger = logging.getLogger(__name__)

FAULT_ENV = "FIRESTEEL_FAULT"
KILL_ENV = "FIRESTEEL_FAULT_KILL"
PGID_ENV = "FIRESTEEL_FAULT_PGID"
MARKER_DIR_ENV = "FIRESTEEL_FAULT_DIR"

POINTS = (
    "source.after_read",
    "sink.after_write",
    "sink.after_pre_commit",
    "driver.before_commit",
    "driver.mid_commit",
    "driver.after_commit",
    "state.after_snapshot",
)
"""Protocol points library code announces. Connectors may add their own (``kafka.*``).

``driver.after_commit`` is the last step before Spark writes ``commits/N``.
"""


def _matches(spec: str, point: str, batch_id: int | None, partition: int | None) -> bool:
    name, _, where = spec.strip().partition("@")
    if name != point:
        return False
    if not where:
        return True
    batch_text, _, partition_text = where.partition(":")
    if batch_id is None or int(batch_text) != batch_id:
        return False
    return not partition_text or (partition is not None and int(partition_text) == partition)


def _claim(spec: str) -> bool:
    """Create this spec's marker; False when an earlier process already fired it."""
    marker_dir = os.environ.get(MARKER_DIR_ENV)
    if not marker_dir:
        return True
    Path(marker_dir).mkdir(parents=True, exist_ok=True)
    marker = Path(marker_dir) / spec.replace("/", "_")
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def fault_point(point: str, batch_id: int | None = None, partition: int | None = None) -> None:
    """Kill this job here if ``FIRESTEEL_FAULT`` asks for ``point`` (see module docs)."""
    specs = os.environ.get(FAULT_ENV)
    if not specs:
        return
    for spec in specs.split(","):
        if _matches(spec, point, batch_id, partition) and _claim(spec.strip()):
            logger.warning("fault injection: killing at %s (batch %s)", spec, batch_id)
            if os.environ.get(KILL_ENV, "job") == "job":
                job = os.environ.get(PGID_ENV)
                if job:
                    os.killpg(int(job), signal.SIGKILL)
                os.killpg(os.getpgid(0), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
