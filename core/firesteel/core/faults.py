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
``#query`` fires only in the streaming query named ``query``: in a Spark task
of it (Spark's description of a micro-batch's jobs starts with the query's
name), or in its driver's commit (:func:`committing`), once the harness's
launcher has recorded which query id bears that name (:func:`name_query`), so
the harness can aim a kill at one of several queries sharing a driver.

A spec naming several queries, ``#a+b``, gathers them: each query that reaches
the point waits there until every query named has reached it (or
:data:`GATHER_SECONDS` passed), then the job is killed, so one SIGKILL of the
whole job lands inside several queries' commits at once (each name that arrived
is left in the marker folder, :func:`gathered`). A matching point kills with
SIGKILL, as a crash would:

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
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
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

QUERIES_DIR = ".queries"
"""Folder of the marker folder holding one file per named query: its id, holding its name."""
GATHER_DIR = ".gathered"
"""Folder of the marker folder holding, per gathering spec, one file per query that arrived."""
GATHER_SECONDS = 60.0
"""How long the queries a spec gathers wait for the last of them before the kill."""
GATHER_POLL_SECONDS = 0.05

_COMMITTING: ContextVar[str | None] = ContextVar("firesteel_committing", default=None)
"""The checkpoint of the query whose driver-side commit runs here, if any."""


@contextmanager
def committing(checkpoint: str) -> Iterator[None]:
    """Run the driver's commit of the query checkpointed at ``checkpoint`` inside this block,
    so that points it reaches match specs aimed at that query (``#name``)."""
    token = _COMMITTING.set(checkpoint)
    try:
        yield
    finally:
        _COMMITTING.reset(token)


def name_query(query_id: str, name: str) -> None:
    """Record, for the armed job's points, that Spark's query ``query_id`` is named ``name``.

    The harness's launcher calls it as it starts each query of a group; without a marker
    folder it does nothing.
    """
    marker_dir = os.environ.get(MARKER_DIR_ENV)
    if marker_dir:
        folder = Path(marker_dir) / QUERIES_DIR
        folder.mkdir(parents=True, exist_ok=True)
        (folder / query_id).write_text(name, encoding="utf-8")


def gathered(marker_dir: str | os.PathLike[str], spec: str) -> list[str]:
    """The queries that had reached the point of the gathering ``spec`` when it fired."""
    folder = Path(marker_dir) / GATHER_DIR / _marker_name(spec)
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _driver_query() -> str | None:
    """The name of the query whose driver-side commit runs here, if it was named."""
    checkpoint = _COMMITTING.get()
    marker_dir = os.environ.get(MARKER_DIR_ENV)
    if not checkpoint or not marker_dir:
        return None
    # Imported only once a spec aims at a query: this module, which every module that
    # fires a point imports, stays free of the storage layer otherwise.
    from firesteel.core.checkpoint import read_query_id

    query_id = read_query_id(checkpoint)
    named = Path(marker_dir) / QUERIES_DIR / query_id if query_id else None
    return named.read_text(encoding="utf-8") if named and named.is_file() else None


def _running_query() -> str | None:
    """The name of the streaming query whose task or driver-side commit runs here."""
    try:
        from pyspark import TaskContext
    except ImportError:
        return None
    context = TaskContext.get()
    if context is None:
        return _driver_query()
    description = context.getLocalProperty(QUERY_DESCRIPTION)
    return description.split("\n", 1)[0] if description else None


def _queries(spec: str) -> list[str]:
    """The queries a spec is aimed at (``#a+b``); empty for any query."""
    _, _, query = spec.strip().partition("#")
    return [name for name in query.split("+") if name]


def _matches(spec: str, point: str, batch_id: int | None, partition: int | None) -> bool:
    target, _, _ = spec.strip().partition("#")
    name, _, where = target.partition("@")
    if name != point:
        return False
    if where:
        batch_text, _, partition_text = where.partition(":")
        if batch_id is None or int(batch_text) != batch_id:
            return False
        if partition_text and (partition is None or int(partition_text) != partition):
            return False
    queries = _queries(spec)
    return not queries or _running_query() in queries


def _marker_name(spec: str) -> str:
    return spec.strip().replace("/", "_")


def _claim(spec: str) -> bool:
    """Create this spec's marker; False when an earlier process already fired it."""
    marker_dir = os.environ.get(MARKER_DIR_ENV)
    if not marker_dir:
        return True
    Path(marker_dir).mkdir(parents=True, exist_ok=True)
    marker = Path(marker_dir) / _marker_name(spec)
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def _gather(spec: str, queries: list[str]) -> None:
    """Wait at this point until every query of ``spec`` reached it (or the wait ran out)."""
    marker_dir = os.environ.get(MARKER_DIR_ENV)
    here = _running_query()
    if not marker_dir or here is None:
        return
    folder = Path(marker_dir) / GATHER_DIR / _marker_name(spec)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / here).touch()
    deadline = time.monotonic() + GATHER_SECONDS
    while time.monotonic() < deadline:
        arrived = {p.name for p in folder.iterdir()}
        if arrived >= set(queries):
            return
        time.sleep(GATHER_POLL_SECONDS)
    logger.warning(
        "fault injection: %s: %s never arrived within %.0f s",
        spec,
        sorted(set(queries) - {p.name for p in folder.iterdir()}),
        GATHER_SECONDS,
    )


def _kill() -> None:
    if os.environ.get(KILL_ENV, "job") == "job":
        job = os.environ.get(PGID_ENV)
        if job:
            os.killpg(int(job), signal.SIGKILL)
        os.killpg(os.getpgid(0), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _fire(specs: str, point: str, batch_id: int | None, partition: int | None) -> None:
    for spec in specs.split(","):
        if not _matches(spec, point, batch_id, partition):
            continue
        queries = _queries(spec)
        if len(queries) > 1:
            # Every query gathered here dies here: whoever creates the marker, all kill.
            _gather(spec, queries)
            _claim(spec)
            logger.warning("fault injection: killing at %s (batch %s)", spec, batch_id)
            _kill()
        if _claim(spec):
            logger.warning("fault injection: killing at %s (batch %s)", spec, batch_id)
            _kill()
