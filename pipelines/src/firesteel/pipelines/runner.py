"""``firesteel run-local`` / ``firesteel run --master``: every streamlet of a blueprint as
queries of one Spark application, or each in its own process (on a cluster: its own Spark
application).

The runner verifies the blueprint and its configuration (nothing starts if
anything is wrong), then, with ``firesteel.runner.jvm = shared`` (the default
of ``run-local``), starts one process, one Spark driver JVM, that runs every
streamlet's queries (:mod:`firesteel.pipelines.host`), logging to
``<work>/logs/pipeline.log``; with ``per-streamlet`` (always with
``--master``) one Python process per streamlet
(:mod:`firesteel.pipelines.process`), each with its own SparkSession, logging
to ``<work>/logs/<streamlet>.log``. Topics are folders under
``<work>/topics`` (:mod:`firesteel.pipelines.local`), or Kafka topics, created
first, when the configuration names a cluster (:mod:`firesteel.pipelines.kafka`);
checkpoints are under ``<work>/checkpoints``, so a restart resumes exactly where the last run
stopped; a redeployment whose consumers cannot read what earlier ones wrote is
refused (:mod:`firesteel.pipelines.redeploy`). The blueprint's folder is put on
the processes' ``PYTHONPATH`` (Spark's Python workers inherit it), so
``module.Class`` references resolve next to it.

No streamlet outlives the runner: a reaper process (:class:`firesteel.core.toolkit.Reaper`)
kills every streamlet's process group when the runner ends, even by SIGKILL of
its group (a parent-death signal would reach the driver only, not its JVM, and
needs an unsafe ``preexec_fn``). One runner
holds a work folder at a time (:mod:`firesteel.pipelines.worklock`): a second
is refused, naming the first one's PID and host.

Ctrl-C (or SIGTERM) stops every streamlet: each stops its queries, waiting for
a running batch to end; one still running after :data:`STOP_TIMEOUT_S` is
killed (its next start recovers from its checkpoint). A process that dies
(one streamlet's, or the shared one) is restarted under
``firesteel.supervision`` (:mod:`firesteel.pipelines.supervision`: bounded
restarts with backoff, each logged), and in the shared process a streamlet
whose query failed has its queries restarted there, the others running on;
one that dies more often than that allows, or exits by itself, stops the
others and the runner exits non-zero, naming its log. In the shared process,
streamlets due for a restart at once are restarted one after the other, each
held until the one before has run its first batch (at most
:data:`firesteel.pipelines.host.STAGGER_S`): every first batch starts Spark's
Python workers, which get a fixed 10 s to connect back to the JVM, and several
starting together on a loaded machine miss it and fail again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType

from firesteel.core.toolkit import Reaper
from firesteel.pipelines.blueprint import load_blueprint
from firesteel.pipelines.check import check_pipeline
from firesteel.pipelines.config import PipelineConfig
from firesteel.pipelines.kafka import create_topics
from firesteel.pipelines.redeploy import check_recorded_schemas, record_schemas
from firesteel.pipelines.supervision import STOPPED_EXIT, Restarts
from firesteel.pipelines.verify import VerifiedBlueprint
from firesteel.pipelines.worklock import WorkLock

logger = logging.getLogger(__name__)

STOP_TIMEOUT_S = 60.0
POLL_S = 0.5
SHARED = "pipeline"
"""The name of the one process that hosts every streamlet (``firesteel.runner.jvm = shared``)."""


def blueprint_on_path(blueprint: Path) -> None:
    """Make ``module.Class`` references next to the blueprint importable here."""
    folder = str(blueprint.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)


def load(
    blueprint: Path, files: Sequence[str], settings: Sequence[str]
) -> tuple[VerifiedBlueprint, PipelineConfig]:
    """Verify ``blueprint`` and its configuration (raises with every problem)."""
    blueprint_on_path(blueprint)
    return check_pipeline(load_blueprint(blueprint), files, settings)


class LocalRunner:
    """The processes of one run of a pipeline: its Spark drivers run here.

    ``processes`` and ``restarts`` are keyed by process: :data:`SHARED`, the one
    process hosting every streamlet (``firesteel.runner.jvm = shared``, the
    default without ``master``), else each streamlet's name.
    ``environment`` adds variables to one streamlet's process; in the shared
    process every streamlet's are added.

    With ``master`` (``spark://host:7077``) each streamlet is its own Spark
    application on that cluster, its driver a process of this runner (client
    mode: Spark's standalone master cannot run a Python driver in the cluster).
    The work folder (checkpoints, state, local topics) and the blueprint's
    folder must then be at the same path on every worker host (a shared mount);
    the executors import the blueprint's modules from there.
    """

    def __init__(
        self,
        blueprint: Path,
        work: Path,
        files: Sequence[str] = (),
        settings: Sequence[str] = (),
        *,
        master: str | None = None,
        environment: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.blueprint = blueprint.resolve()
        self.master = master
        self.environment = {name: dict(env) for name, env in (environment or {}).items()}
        """Extra environment variables of one streamlet's process, by streamlet name."""
        self.work = work.resolve()
        self.files = [str(Path(f).resolve()) for f in files]
        self.settings = list(settings)
        self.verified, self.config = load(self.blueprint, self.files, self.settings)
        check_recorded_schemas(self.verified, self.work)
        self.shared = master is None and self.config.jvm == "shared"
        """Whether one process and Spark application hosts every streamlet."""
        streamlets = tuple(self.verified.streamlets)
        self.units = {SHARED: streamlets} if self.shared else {n: (n,) for n in streamlets}
        """The streamlets of each process, by process name."""
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.restarts = {name: Restarts(self.config.supervision()) for name in self.units}
        """Each process's restarts in this run."""
        self._due: dict[str, float] = {}
        """When each dead streamlet waiting for its restart is due (monotonic seconds)."""
        self._env: dict[str, str] = {}
        self._stopping = False
        self._lock = WorkLock(self.work)
        self._reaper = Reaper()

    def log_path(self, name: str) -> Path:
        """Where streamlet or process ``name`` logs (every streamlet in the shared log)."""
        return self.work / "logs" / f"{SHARED if self.shared else name}.log"

    def start(self) -> None:
        """Start every streamlet's process; WorkFolderInUseError when another runner holds
        the work folder."""
        self._lock.acquire()
        (self.work / "logs").mkdir(parents=True, exist_ok=True)
        record_schemas(self.verified, self.work)
        if self.config.kafka_properties():
            create_topics(self.verified, self.config)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(self.blueprint.parent), env.get("PYTHONPATH", "")) if p
        )
        self._env = env
        for name in self.units:
            self._launch(name)

    def _launch(self, name: str) -> None:
        """Start process ``name`` (module docs), appending to its log."""
        module = "host" if self.shared else "process"
        command = [sys.executable, "-m", f"firesteel.pipelines.{module}", str(self.blueprint)]
        command += [] if self.shared else [name]
        command += ["--work", str(self.work)]
        if self.master:
            command += ["--master", self.master]
        for path in self.files:
            command += ["--conf", path]
        command += self.settings
        with open(self.log_path(name), "ab") as log:
            self.processes[name] = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self._environment(name),
                start_new_session=True,
            )
        self._reaper.guard(self.processes[name].pid)
        what = "every streamlet" if self.shared else f"streamlet {name}"
        logger.info("%s started (pid %d)", what, self.processes[name].pid)

    def _environment(self, name: str) -> dict[str, str]:
        env = dict(self._env)
        for streamlet in self.units[name]:
            env.update(self.environment.get(streamlet, {}))
        return env

    def step(self) -> str | None:
        """Restart each dead streamlet once its backoff is over; the name of one that may not
        be restarted (it exited by itself, or died more often than supervision allows)."""
        now = time.monotonic()
        for name, process in self.processes.items():
            due = self._due.get(name)
            if due is not None:
                if now >= due:
                    del self._due[name]
                    self._launch(name)
                continue
            code = process.poll()
            if code is None:
                continue
            stopped = code in (0, STOPPED_EXIT)
            delay = None if stopped else self.restarts[name].after_death(now)
            if delay is None:
                logger.error(
                    "%s exited with %d%s: stopping the pipeline; see %s",
                    self._what(name),
                    code,
                    self._given_up(name, code),
                    self.log_path(name),
                )
                return name
            # The dead driver's group may still hold its JVM or Python workers: none of them
            # may write beside the restarted streamlet.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            self._reaper.release(process.pid)
            policy = self.restarts[name].policy
            logger.warning(
                "%s exited with %d: restart %d (at most %d within %g s) in %.1f s; see %s",
                self._what(name),
                code,
                self.restarts[name].total,
                policy.restarts,
                policy.window.total_seconds(),
                delay,
                self.log_path(name),
            )
            self._due[name] = now + delay
        return None

    def _what(self, name: str) -> str:
        return "the pipeline's process" if self.shared else f"streamlet {name}"

    def _given_up(self, name: str, code: int) -> str:
        """Why process ``name``, exited with ``code``, is not restarted."""
        policy = self.restarts[name].policy
        if code == 0:
            return " (its queries finished)"
        if code == STOPPED_EXIT:
            return " (a streamlet stopped it: its log names which and why)"
        if policy.restarts == 0:
            return " (supervision is off: firesteel.supervision.restarts = 0)"
        return (
            f" after {self.restarts[name].total} restarts, more than "
            f"firesteel.supervision.restarts = {policy.restarts} within "
            f"{policy.window.total_seconds():g} s allows"
        )

    def wait(self) -> int:
        """Run until stopped (0) or until a streamlet fails for good (1, its log named)."""
        previous = signal.signal(signal.SIGTERM, self._on_signal)
        try:
            while not self._stopping:
                if self.step() is not None:
                    self.stop()
                    return 1
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            logger.info("stopping every streamlet")
        finally:
            signal.signal(signal.SIGTERM, previous)
        self.stop()
        return 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        logger.info("stopping every streamlet")
        self._stopping = True

    def stop(self) -> None:
        """Ask every streamlet to stop; kill what has not stopped within the timeout."""
        self._due.clear()
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for name, process in self.processes.items():
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("%s did not stop in time: killing it", self._what(name))
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        # The pipe's end makes the reaper kill what is left of every streamlet's group (a
        # JVM still shutting down), then exit.
        self._reaper.close()
        self._lock.release()
