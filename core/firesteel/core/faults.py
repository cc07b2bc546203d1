"""Fault injection points, used by the crash-test harness to kill a job at an exact step.

Each point is declared once, by the module that fires it, at import::

    AFTER_SEND = fault_point("wal.after_send", "a WAL segment was sent, before its commit record")
    ...
    AFTER_SEND.fire(batch_id, partition)

and recorded in :data:`REGISTRY`, which the arming side
(``firesteel.testing``, a separate distribution) checks every name it arms
against, so a misspelled point is an error instead of a kill that never comes.
A distribution lists its declaring modules under the entry point group
:data:`ENTRY_POINT_GROUP` so the arming side can import them first.

Firing does nothing unless the environment variable ``FIRESTEEL_FAULT`` names
that point, as ``point``, ``point@batch`` or ``point@batch:partition`` (several,
comma-separated); unarmed, it costs one environment lookup. A spec ending in
``#query`` fires only in a Spark task of the streaming query named ``query``
(Spark's description of a micro-batch's jobs starts with the query's name), so
the harness can aim a task kill at one of several queries sharing a driver; a
point reached outside a task (the driver's commit) never matches such a spec.
A matching point kills with SIGKILL, as a crash would:

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
from dataclasses import dataclass
from pathlib import Path

from firesteel.core.errors import FiresteelError

logger = logging.getLogger(__name__)

FAULT_ENV = "FIRESTEEL_FAULT"
KILL_ENV = "FIRESTEEL_FAULT_KILL"
PGID_ENV = "FIRESTEEL_FAULT_PGID"
MARKER_DIR_ENV = "FIRESTEEL_FAULT_DIR"

ENTRY_POINT_GROUP = "firesteel.fault_points"
"""Entry point group naming the modules of a distribution that declare fault points."""


class FaultPointError(FiresteelError, ValueError):
    """A fault point is declared twice with different meanings, or armed but never declared."""


@dataclass(frozen=True)
class FaultPoint:
    """A named step at which the crash-test harness may kill the job (see module docs)."""

    name: str
    meaning: str

    def fire(self, batch_id: int | None = None, partition: int | None = None) -> None:
        """Kill this job here if ``FIRESTEEL_FAULT`` arms this point for this batch/partition."""
        specs = os.environ.get(FAULT_ENV)
        if specs:
            _fire(specs, self.name, batch_id, partition)


REGISTRY: dict[str, FaultPoint] = {}
"""Every fault point declared by a module imported so far, by name."""


def fault_point(name: str, meaning: str) -> FaultPoint:
    """Declare the fault point ``name`` (what has happened when it fires: ``meaning``).

    Called once at import by the module that fires it. Two modules firing the
    same step share one declaration; declaring a name again with another
    meaning is a :class:`FaultPointError`.
    """
    known = REGISTRY.get(name)
    if known is not None and known.meaning != meaning:
        msg = f"fault point {name!r} is already declared as {known.meaning!r}"
        raise FaultPointError(msg)
    point = known or FaultPoint(name, meaning)
    REGISTRY[name] = point
    return point


QUERY_DESCRIPTION = "spark.job.description"
"""The task property whose first line names the streaming query (Spark's batch description)."""


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


def _fire(specs: str, point: str, batch_id: int | None, partition: int | None) -> None:
    for spec in specs.split(","):
        if _matches(spec, point, batch_id, partition) and _claim(spec.strip()):
            logger.warning("fault injection: killing at %s (batch %s)", spec, batch_id)
            if os.environ.get(KILL_ENV, "job") == "job":
                job = os.environ.get(PGID_ENV)
                if job:
                    os.killpg(int(job), signal.SIGKILL)
                os.killpg(os.getpgid(0), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
