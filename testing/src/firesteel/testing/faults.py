"""The fault handler ``firesteel-testing`` installs: SIGKILL where the crash harness armed.

Installed in every process through the entry point group
:data:`firesteel.core.faults.HANDLER_GROUP` (Spark's Python workers included),
:func:`kill_if_armed` kills when the environment variable ``FIRESTEEL_FAULT``
names the point reached, as ``point``, ``point@batch`` or
``point@batch:partition`` (several, comma-separated); unarmed, it costs one
environment lookup. A spec ending in ``#query`` fires only in a Spark task of
the streaming query named ``query`` (Spark's description of a micro-batch's jobs
starts with the query's name), so the harness can aim a task kill at one of
several queries sharing a driver; a point reached outside a task (the driver's
commit) never matches such a spec. A matching point kills with SIGKILL, as a
crash would:

* ``FIRESTEEL_FAULT_KILL=job`` (default): the process group in
  ``FIRESTEEL_FAULT_PGID`` (the job the harness started: driver and JVM) and
  the caller's own process group (Spark's Python workers);
* ``FIRESTEEL_FAULT_KILL=process``: only the calling process, which Spark sees
  as a failed task and retries.

``FIRESTEEL_FAULT_DIR`` names a folder of markers so each point fires once,
even when Spark retries the task that hit it.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

from firesteel.core.faults import FaultPoint

__all__ = ["FAULT_ENV", "KILL_ENV", "MARKER_DIR_ENV", "PGID_ENV", "kill_if_armed"]

logger = logging.getLogger(__name__)

FAULT_ENV = "FIRESTEEL_FAULT"
KILL_ENV = "FIRESTEEL_FAULT_KILL"
PGID_ENV = "FIRESTEEL_FAULT_PGID"
MARKER_DIR_ENV = "FIRESTEEL_FAULT_DIR"

QUERY_DESCRIPTION = "spark.job.description"
"""The task property whose first line names the streaming query (Spark's batch description)."""


def kill_if_armed(point: FaultPoint, batch_id: int | None, partition: int | None) -> None:
    """Kill this job here if ``FIRESTEEL_FAULT`` arms ``point`` for this batch/partition."""
    specs = os.environ.get(FAULT_ENV)
    if not specs:
        return
    for spec in specs.split(","):
        if _matches(spec, point.name, batch_id, partition) and _claim(spec.strip()):
            logger.warning("fault injection: killing at %s (batch %s)", spec, batch_id)
            if os.environ.get(KILL_ENV, "job") == "job":
                job = os.environ.get(PGID_ENV)
                if job:
                    os.killpg(int(job), signal.SIGKILL)
                os.killpg(os.getpgid(0), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)


def _running_query() -> str | None:
    """The name of the streaming query whose task is running here; None outside a task."""
    try:
        from pyspark import TaskContext
    except ImportError:
        return None
    context = TaskContext.get()
    description = context.getLocalProperty(QUERY_DESCRIPTION) if context else None
    return description.split("\n", 1)[0] if description else None


def _matches(spec: str, point: str, batch_id: int | None, partition: int | None) -> bool:
    target, _, query = spec.strip().partition("#")
    name, _, where = target.partition("@")
    if name != point:
        return False
    if where:
        batch_text, _, partition_text = where.partition(":")
        if batch_id is None or int(batch_text) != batch_id:
            return False
        if partition_text and (partition is None or int(partition_text) != partition):
            return False
    return not query or _running_query() == query


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
