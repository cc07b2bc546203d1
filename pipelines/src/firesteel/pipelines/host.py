"""Every streamlet of a pipeline in one Spark application: ``python -m firesteel.pipelines.host``.

Started by :class:`firesteel.pipelines.runner.LocalRunner` when
``firesteel.runner.jvm = shared`` (the default of ``run-local``), as Cloudflow's
local runner hosted every streamlet in one JVM. One driver process and JVM;
each streamlet gets its own SparkSession of that application (a clone of
the first: its own SQL settings, among them its ``parallelism``, and its own
query manager), its own fair-scheduler pool (so
one streamlet's batches do not queue behind another's), its queries named
``<pipeline>.<streamlet>.<query>`` and its own checkpoints, as in a process of
its own.

Supervision is per streamlet, in this process: when one of a streamlet's
queries fails, its other queries are stopped and, under
``firesteel.supervision``, all of them are started again from their
checkpoints in a new session, the other streamlets running on. Starts are
staggered: a streamlet due to start while another started one has not yet run
its first batch waits for it (at most :data:`STAGGER_S`), so the application's
first start brings its streamlets up one after the other, upstream first
(:func:`start_order`), and streamlets that failed together restart one after
the other. A query's first batch starts Spark's Python processes (the
source's planner, the writer, the first task's worker), and Spark gives each a
fixed 10 s to connect back to the JVM: several streamlets starting theirs at
once on a loaded machine miss it and fail again, each failure spending a
restart. Started together they also add up: each planner's Python worker is
kept for reuse by the next first batch one after the other, but is one more
process (40-58 MiB) per streamlet planning at the same time. The orders example
(five streamlets, 2026-11-29) peaked at 1,683-1,688 MiB PSS while all five ran
their first batches together, 1,513-1,547 MiB started one after the other (and
its first output came sooner: 36-39 s instead of 52).

A streamlet that fails more often than supervision allows, or whose queries all
finish, stops every streamlet; the process then exits :data:`STOPPED_EXIT` so
the runner stops the pipeline instead of restarting it. A death of the whole
process (the JVM, a SIGKILL) is the runner's to restart, under the same policy.

Every streamlet shares the process's environment and the application's
settings that are not ``spark.sql.*`` (``firesteel.pipelines.config``).

Memory: issue 50's goal for the orders example (five streamlets, local topics) is a peak of
1.5 GB PSS for the whole process tree, read as 1,536 MiB; it peaks at 1,496-1,501 MiB
(2026-11-29, two samples) since the staggered first start and firesteel's worker daemon
sharing pandas with its workers. Spark keeps one Python worker daemon per worker module,
not per streamlet (every streamlet's environment is the same), so six daemons serve them
all (the task workers' and five of Spark's data source planner and commit modules). The
rest is a ``python_streaming_source_runner`` process per Python streaming source (63 MiB
each, six here: the ingress and every local-topic inlet) and up to two task workers per
task slot. The leads measured, and what stands in the way of each, are in the pipelines README
("Memory of a local pipeline").
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import Any

from firesteel.core import LOCAL_PROFILE, WORKER_DAEMON
from firesteel.pipelines.config import PipelineConfig
from firesteel.pipelines.errors import ConfigurationError
from firesteel.pipelines.process import start_streamlet
from firesteel.pipelines.progress import record_topology
from firesteel.pipelines.runner import load
from firesteel.pipelines.supervision import STOPPED_EXIT, Restarts
from firesteel.pipelines.verify import VerifiedBlueprint

logger = logging.getLogger("firesteel.pipelines.host")

POLL_S = 1.0
MASTER = "local[2]"
"""The application's master: every streamlet's tasks share its two task slots."""
POOL = "spark.scheduler.pool"
IDLE_WORKERS = {"spark.python.factory.idleWorkerMaxPoolSize": "1"}
"""Spark keeps each idle Python worker for reuse, and in one application every
streamlet's queries add to the pools (one per worker kind: tasks, the sink's commit
runner, the writer's planner): the orders example (5 streamlets, local topics, quiet
machine) held 26 forked workers, 1.66 GB of its 2.87 GB peak PSS. Keeping one idle
worker per kind: 11 workers, a 1.86 GB peak, the same output. A task past the kept
one forks a new worker from Spark's daemon (milliseconds). The cost: a failed task
makes Spark cancel its batch's other tasks, and one cancelled while it waits for a new
worker makes Spark restart the daemon (logged as a connect-back timeout, then "Lost
connection to Python daemon"), which ends every worker it forked: the other
streamlets' tasks then in flight fail and supervision restarts their queries (each
resumes from its checkpoint, exactly-once as after any failure). Fewer idle workers
make that wait likelier; the pipeline crash test saw it once in five suite runs. A
streamlet's ``config`` may set the key back."""
SMALL_JVM = {
    key: LOCAL_PROFILE[key] for key in ("spark.driver.memory", "spark.driver.extraJavaOptions")
}
"""The application's JVM as :data:`firesteel.core.LOCAL_PROFILE` starts it (a heap from
64 MB up to 512 MB, the serial collector, C1 only): the streamlets' data lives in their
Python workers. The orders example's JVM at its peak: 356 MB PSS against 455 MB with
Spark's defaults (quiet machine, 2026-11-29; the whole pipeline 1.75 GB against 1.91,
its output the same). Streamlets that all set a key in their ``config`` replace it."""
TASK_DAEMON = dict(WORKER_DAEMON)
"""Task workers fork from firesteel's worker daemon (:mod:`firesteel.core.spark.daemon`), as
:data:`firesteel.core.LOCAL_PROFILE` has them: a worker forked from PySpark's own daemon
imports pyarrow, firesteel and, through ``pyarrow.array`` in PySpark's data source writer,
pandas after the fork, each copy its own; forked from firesteel's, it starts with the
daemon's, pandas included, frozen so that they stay shared. The orders example's task
workers at its peak: 57-70 MB PSS each against 88-102 MB (2026-11-29, load 7-13, the same
output) before pandas and the freeze; the whole pipeline's peak then 1.58-1.85 GiB against
1.71-1.78, 1,496-1,501 MiB with both and the staggered start. Spark's planner
and commit runners start PySpark's daemon whatever this says. Streamlets that all set the
key replace it."""
STAGGER_S = 30.0
"""How long a started streamlet's first batch may hold back the next due start (module
docs): a streamlet that is slower than that to start does not hold the others for longer."""


@dataclass
class Hosted:
    """One streamlet of the application: its queries, restarts and pending restart."""

    name: str
    restarts: Restarts
    queries: Sequence[Any] = ()
    due: float | None = None
    """When its start or restart is due (monotonic seconds), while it waits for one."""
    session: Any = None
    """Its current session, whose query manager lists every query it started."""

    def started_all(self) -> bool:
        """Whether each of its queries has run its first batch (reported progress)."""
        return all(q.lastProgress is not None for q in self.queries)


def application_conf(config: PipelineConfig, names: Sequence[str]) -> dict[str, str]:
    """The settings the application starts with: each one every streamlet gives alike (its
    ``spark.sql.*`` settings are set again on its own session)."""
    confs = [config.streamlet(name).spark_conf for name in names]
    shared = {k: v for k, v in confs[0].items() if all(c.get(k) == v for c in confs[1:])}
    return {
        "spark.ui.showConsoleProgress": "false",
        "spark.scheduler.mode": "FAIR",
        **IDLE_WORKERS,
        **SMALL_JVM,
        **TASK_DAEMON,
        **{k: str(v) for k, v in shared.items()},
    }


def start_order(verified: VerifiedBlueprint) -> list[str]:
    """Every streamlet, each after the streamlets writing the topics it reads (the
    blueprint's order among equals, and where topics make a cycle)."""
    names = list(verified.streamlets)
    graph: TopologicalSorter[str] = TopologicalSorter()
    for name in names:
        graph.add(name)
    for topic, readers in verified.consumers.items():
        for reader in readers:
            for writer in verified.producers.get(topic, ()):
                if writer.streamlet != reader.streamlet:
                    graph.add(reader.streamlet, writer.streamlet)
    try:
        graph.prepare()
    except CycleError:
        return names
    ordered: list[str] = []
    while graph.is_active():
        ready = sorted(graph.get_ready(), key=names.index)
        ordered += ready
        graph.done(*ready)
    return ordered


@contextmanager
def _active_session_kept(spark: Any) -> Iterator[None]:
    """Leave the calling thread's active Spark session as it was.

    Starting a query makes its session the thread's active one, and Spark looks up a
    Python data source by name in the *active* session: a streamlet's clone left active
    would hide every data source registered with the application after it was cloned
    (a caller's next ``format(...)`` then fails with ``DATA_SOURCE_NOT_FOUND``). PySpark
    keeps its own record of it, which ``SparkSession.active()`` and
    ``getActiveSession()`` return: kept too, or they would hand the caller the clone.
    """
    from pyspark.sql import SparkSession

    sessions = SparkSession._get_j_spark_session_class(spark.sparkContext._jvm)
    before = sessions.getActiveSession()
    python_before = SparkSession._activeSession
    try:
        yield
    finally:
        SparkSession._activeSession = python_before
        if before.isDefined():
            sessions.setActiveSession(before.get())
        else:
            sessions.clearActiveSession()


class Host:
    """The streamlets of one pipeline as queries of one Spark application (module docs)."""

    def __init__(
        self, spark: Any, verified: VerifiedBlueprint, config: PipelineConfig, work: Path
    ) -> None:
        self.spark = spark
        self.verified = verified
        self.config = config
        self.work = work
        record_topology(verified, work)
        policy = config.supervision()
        self.streamlets = {name: Hosted(name, Restarts(policy)) for name in start_order(verified)}
        """Every streamlet, upstream first: due streamlets start in this order."""
        self._starting: tuple[str, float] | None = None
        """The streamlet started last, and when, until its first batch ran (module docs)."""
        self._held: set[str] = set()
        """Due streamlets already logged as waiting for :attr:`_starting`."""

    def begin(self, now: float) -> None:
        """Make every streamlet due: :meth:`step` starts them one after the other."""
        for hosted in self.streamlets.values():
            hosted.due = now

    def session(self, name: str) -> Any:
        """A new session of the application for streamlet ``name``, its settings applied."""
        from pyspark.sql import SparkSession

        # A clone, not newSession(): a new session lacks the Python data sources registered
        # with the first (firesteel's), and registering them again is refused as a duplicate.
        session = SparkSession(self.spark.sparkContext, self.spark._jsparkSession.cloneSession())
        for key, value in self.config.streamlet(name).spark_conf.items():
            if session.conf.isModifiable(key):
                session.conf.set(key, str(value))
            elif self.spark.conf.get(key, None) != str(value):
                msg = (
                    f"streamlet {name!r}: Spark setting {key!r} = {value!r} is the "
                    "application's, which every streamlet shares with firesteel.runner.jvm = "
                    "shared; set it in firesteel.runtimes.spark.config, or use "
                    "firesteel.runner.jvm = per-streamlet"
                )
                raise ConfigurationError(msg)
        return session

    def start(self, name: str) -> None:
        """Start streamlet ``name``'s queries in a new session, in its own scheduler pool."""
        hosted = self.streamlets[name]
        hosted.due = None
        hosted.session = session = self.session(name)
        context = self.spark.sparkContext
        # A query's batches run with the local properties of the thread that started it.
        context.setLocalProperty(POOL, name)
        try:
            with _active_session_kept(self.spark):
                hosted.queries = start_streamlet(
                    session, self.verified, self.config, name, self.work
                )
        finally:
            context.setLocalProperty(POOL, None)
        logger.info("streamlet %s running %d queries", name, len(hosted.queries))

    def step(self, now: float) -> str | None:
        """Restart failed streamlets once their backoff is over, one after the other (module
        docs); the name of one that stops the pipeline (it failed more often than supervision
        allows, or finished)."""
        for name, hosted in self.streamlets.items():
            if hosted.due is not None:
                continue
            failed = [q for q in hosted.queries if not q.isActive and q.exception() is not None]
            if failed:
                why = f"query {failed[0].name} failed: {failed[0].exception()}"
                if not self._failed(name, why, now):
                    return name
            elif not any(q.isActive for q in hosted.queries):
                logger.error("streamlet %s: its queries finished: stopping the pipeline", name)
                return name
        self._settle(now)
        order = list(self.streamlets)
        due = sorted(
            (h for h in self.streamlets.values() if h.due is not None and now >= h.due),
            key=lambda h: (h.due, order.index(h.name)),
        )
        for hosted in due:
            if self._starting is not None:
                self._hold(hosted.name)
                continue
            if not self.launch(hosted.name, now):
                return hosted.name
            if hosted.due is None:
                self._starting = (hosted.name, now)
        return None

    def _settle(self, now: float) -> None:
        """Let the next due start go once the streamlet started last ran its first batch
        (or failed again, or :data:`STAGGER_S` passed)."""
        if self._starting is None:
            return
        name, since = self._starting
        hosted = self.streamlets[name]
        if hosted.due is not None:
            reason = "failed again"
        elif hosted.started_all():
            reason = "ran its first batch"
        elif now - since >= STAGGER_S:
            reason = f"has not run its first batch within {STAGGER_S:g} s"
        else:
            return
        logger.info("streamlet %s: started, %s: the next due start may go", name, reason)
        self._starting = None
        self._held.clear()

    def _hold(self, name: str) -> None:
        """Log, once per wait, that due streamlet ``name`` waits for the one starting."""
        if name in self._held or self._starting is None:
            return
        self._held.add(name)
        logger.info(
            "streamlet %s: start due, held until streamlet %s has run its first batch (at "
            "most %g s): each starts Spark's Python workers, which must connect back within 10 s",
            name,
            self._starting[0],
            STAGGER_S,
        )

    def launch(self, name: str, now: float) -> bool:
        """Start streamlet ``name``; a start that fails is a failure of the streamlet. False
        when it must stop the pipeline (a configuration problem, or no restart left)."""
        try:
            self.start(name)
        except ConfigurationError as exc:
            self._stop(name)
            logger.error("streamlet %s: %s: stopping the pipeline", name, exc)
            return False
        except Exception as exc:
            return self._failed(name, f"its queries did not start: {exc}", now)
        return True

    def _failed(self, name: str, why: str, now: float) -> bool:
        """Stop streamlet ``name``'s queries and schedule its restart; False when supervision
        allows none."""
        hosted = self.streamlets[name]
        self._stop(name)
        delay = hosted.restarts.after_death(now)
        policy = hosted.restarts.policy
        if delay is None:
            given_up = (
                "supervision is off: firesteel.supervision.restarts = 0"
                if policy.restarts == 0
                else f"after {hosted.restarts.total} restarts, more than "
                f"firesteel.supervision.restarts = {policy.restarts} within "
                f"{policy.window.total_seconds():g} s allows"
            )
            logger.error("streamlet %s: %s (%s): stopping the pipeline", name, why, given_up)
            return False
        logger.warning(
            "streamlet %s: %s: restart %d (at most %d within %g s) in %.1f s, the other "
            "streamlets running on",
            name,
            why,
            hosted.restarts.total,
            policy.restarts,
            policy.window.total_seconds(),
            delay,
        )
        hosted.due = now + delay
        return True

    def _stop(self, name: str) -> None:
        """Stop every query streamlet ``name`` started, returned by its logic or not."""
        hosted = self.streamlets[name]
        started = list(hosted.session.streams.active) if hosted.session is not None else []
        for query in [*hosted.queries, *started]:
            query.stop()
        hosted.queries = ()

    def stop(self) -> None:
        """Stop every streamlet's queries (each waits for its running batch)."""
        for name in self.streamlets:
            self._stop(name)


def main(argv: list[str] | None = None) -> int:
    """Run every streamlet until SIGTERM (0) or until one stops the pipeline
    (:data:`STOPPED_EXIT`)."""
    parser = argparse.ArgumentParser(prog="python -m firesteel.pipelines.host")
    parser.add_argument("blueprint")
    parser.add_argument("--work", required=True)
    parser.add_argument("--conf", action="append", default=[])
    parser.add_argument("settings", nargs="*")
    args = parser.parse_intermixed_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    verified, config = load(Path(args.blueprint), args.conf, args.settings)
    from firesteel.core import local_session

    names = list(verified.streamlets)
    spark = local_session(
        verified.blueprint.name,
        master=MASTER,
        config=application_conf(config, names),
        log_level="WARN",
    )
    stopping = threading.Event()
    # Only a flag here: a Py4J call from a signal handler would interrupt the main
    # thread's own call on the same connection.
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    host = Host(spark, verified, config, Path(args.work))
    try:
        host.begin(time.monotonic())
        while not stopping.wait(POLL_S):
            if host.step(time.monotonic()) is not None:
                return STOPPED_EXIT
        logger.info("stopping every streamlet")
        return 0
    finally:
        host.stop()


if __name__ == "__main__":
    sys.exit(main())
