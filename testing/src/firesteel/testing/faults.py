"""The fault handler ``firesteel-testing`` installs: SIGKILL where the crash harness armed.

Installed in every process through the entry point group
:data:`firesteel.core.faults.HANDLER_GROUP` (Spark's Python workers included),
:func:`kill_if_armed` kills when the environment variable ``FIRESTEEL_FAULT``
names the point reached, as ``point``, ``point@batch`` or
``point@batch:partition`` (several, comma-separated); unarmed, it costs one
environment lookup. A spec ending in ``#query`` fires only in the streaming query
named ``query``: in a Spark task of it (Spark's description of a micro-batch's
jobs starts with the query's name), or in its driver's commit
(:func:`firesteel.core.faults.committing`), once the harness's launcher has
recorded which query id bears that name (:func:`name_query`), so the harness can
aim a kill at one of several queries sharing a driver.

A spec naming several queries, ``#a+b``, gathers them: each query that reaches
the point waits there until every query named has reached it (or
:data:`GATHER_SECONDS` passed), then the job is killed, so one SIGKILL of the
whole job lands inside several queries' commits at once (each name that arrived
is left in the marker folder, :func:`gathered`). A matching point kills with
SIGKILL, as a crash would:

* ``FIRESTEEL_FAULT_KILL=job`` (default): the process group in
  ``FIRESTEEL_FAULT_PGID`` (the job the harness started: driver and JVM) and
  the caller's own process group (Spark's Python workers). ``FIRESTEEL_FAULT_PGID=session``
  names the group leading the caller's session, for a job the harness did not start
  but some launcher started in a session of its own (a pipeline runner's process):
  PySpark's daemon gives its workers a process group of their own, so the caller's
  group alone would spare the driver;
* ``FIRESTEEL_FAULT_KILL=process``: only the calling process, which Spark sees
  as a failed task and retries.

A spec ending in ``!job`` or ``!process`` kills that way whatever
``FIRESTEEL_FAULT_KILL`` says, so one process's environment can arm a task
kill and a whole-job kill together (a pipeline's one process, which no harness
restarts between them).

``FIRESTEEL_FAULT_DIR`` names a folder of markers so each point fires once,
even when Spark retries the task that hit it.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

from firesteel.core.faults import FaultPoint, committing_checkpoint

__all__ = [
    "FAULT_ENV",
    "GATHER_SECONDS",
    "KILL_ENV",
    "MARKER_DIR_ENV",
    "MODE_SEPARATOR",
    "PGID_ENV",
    "SESSION",
    "gathered",
    "kill_if_armed",
    "name_query",
]

logger = logging.getLogger(__name__)

FAULT_ENV = "FIRESTEEL_FAULT"
KILL_ENV = "FIRESTEEL_FAULT_KILL"
PGID_ENV = "FIRESTEEL_FAULT_PGID"
MARKER_DIR_ENV = "FIRESTEEL_FAULT_DIR"

SESSION = "session"
"""``FIRESTEEL_FAULT_PGID``'s value naming the group that leads the caller's session."""
MODE_SEPARATOR = "!"
"""Before a spec's own kill mode (``job`` or ``process``), which overrides :data:`KILL_ENV`."""
KILL_MODES = ("job", "process")

QUERY_DESCRIPTION = "spark.job.description"
"""The task property whose first line names the streaming query (Spark's batch description)."""


QUERIES_DIR = ".queries"
"""Folder of the marker folder holding one file per named query: its id, holding its name."""
GATHER_DIR = ".gathered"
"""Folder of the marker folder holding, per gathering spec, one file per query that arrived."""
GATHER_SECONDS = 60.0
"""How long the queries a spec gathers wait for the last of them before the kill."""
GATHER_POLL_SECONDS = 0.05


def kill_if_armed(point: FaultPoint, batch_id: int | None, partition: int | None) -> None:
    """Kill this job here if ``FIRESTEEL_FAULT`` arms ``point`` for this batch/partition."""
    specs = os.environ.get(FAULT_ENV)
    if not specs:
        return
    for armed in specs.split(","):
        spec, mode = _mode(armed)
        if not _matches(spec, point.name, batch_id, partition):
            continue
        queries = _queries(spec)
        if len(queries) > 1:
            # Every query gathered here dies here: whoever creates the marker, all kill.
            if not _gather(spec, queries):
                continue
            _claim(spec)
            logger.warning("fault injection: killing at %s (batch %s)", spec, batch_id)
            _kill(mode)
        if _claim(spec):
            logger.warning("fault injection: killing at %s (batch %s)", spec, batch_id)
            _kill(mode)


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


def _mode(armed: str) -> tuple[str, str]:
    """The spec without its own kill mode, and the mode it kills with."""
    spec, separator, mode = armed.strip().rpartition(MODE_SEPARATOR)
    if separator and mode in KILL_MODES:
        return spec, mode
    return armed.strip(), os.environ.get(KILL_ENV, "job")


def _kill(mode: str) -> None:
    if mode == "job":
        job = os.environ.get(PGID_ENV)
        if job:
            os.killpg(os.getsid(0) if job == SESSION else int(job), signal.SIGKILL)
        os.killpg(os.getpgid(0), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _driver_query() -> str | None:
    """The name of the query whose driver-side commit runs here, if it was named."""
    checkpoint = committing_checkpoint()
    marker_dir = os.environ.get(MARKER_DIR_ENV)
    if not checkpoint or not marker_dir:
        return None
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


def _gather(spec: str, queries: list[str]) -> bool:
    """Wait at this point until every query of ``spec`` reached it (or the wait ran out);
    False, without waiting, where another process of the same query already waits here.

    One waiter per query: a query's tasks reaching a point in its tasks would otherwise
    each hold a task slot while they wait, and with every slot held the other queries
    never reach the point (seen in CI: the in-task state query's two tasks held both slots
    of ``local[2]`` and the map query's commit never came)."""
    marker_dir = os.environ.get(MARKER_DIR_ENV)
    here = _running_query()
    if not marker_dir or here is None:
        return True
    folder = Path(marker_dir) / GATHER_DIR / _marker_name(spec)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(folder / here, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    deadline = time.monotonic() + GATHER_SECONDS
    while time.monotonic() < deadline:
        if {p.name for p in folder.iterdir()} >= set(queries):
            return True
        time.sleep(GATHER_POLL_SECONDS)
    logger.warning(
        "fault injection: %s: %s never arrived within %.0f s",
        spec,
        sorted(set(queries) - {p.name for p in folder.iterdir()}),
        GATHER_SECONDS,
    )
    return True


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
