"""``firesteel run-local`` / ``firesteel run --master``: every streamlet of a blueprint in its
own process (on a cluster: its own Spark application).

The runner verifies the blueprint and its configuration (nothing starts if
anything is wrong), then starts one Python process per streamlet
(:mod:`firesteel.pipelines.process`), each with its own SparkSession, logging
to ``<work>/logs/<streamlet>.log``. Topics are folders under
``<work>/topics`` (:mod:`firesteel.pipelines.local`), or Kafka topics, created
first, when the configuration names a cluster (:mod:`firesteel.pipelines.kafka`);
checkpoints are under ``<work>/checkpoints``, so a restart resumes exactly where the last run
stopped; a redeployment whose consumers cannot read what earlier ones wrote is
refused (:mod:`firesteel.pipelines.redeploy`). The blueprint's folder is put on
the processes' ``PYTHONPATH`` (Spark's Python workers inherit it), so
``module.Class`` references resolve next to it.

Ctrl-C (or SIGTERM) stops every streamlet: each stops its queries, waiting for
a running batch to end; one still running after :data:`STOP_TIMEOUT_S` is
killed (its next start recovers from its checkpoint). If one streamlet fails,
the others are stopped and the runner exits non-zero, naming its log.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType

from firesteel.pipelines.blueprint import load_blueprint
from firesteel.pipelines.config import PipelineConfig
from firesteel.pipelines.kafka import create_topics
from firesteel.pipelines.redeploy import check_recorded_schemas, record_schemas
from firesteel.pipelines.verify import VerifiedBlueprint, verify

logger = logging.getLogger(__name__)

STOP_TIMEOUT_S = 60.0
POLL_S = 0.5


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
    verified = verify(load_blueprint(blueprint))
    return verified, PipelineConfig.load(verified, files, settings)


class LocalRunner:
    """The processes of one run of a pipeline: each streamlet's driver runs here.

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
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._stopping = False

    def log_path(self, streamlet: str) -> Path:
        """Where streamlet ``streamlet`` logs."""
        return self.work / "logs" / f"{streamlet}.log"

    def start(self) -> None:
        """Start every streamlet's process."""
        (self.work / "logs").mkdir(parents=True, exist_ok=True)
        record_schemas(self.verified, self.work)
        if self.config.kafka_properties():
            create_topics(self.verified, self.config)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(self.blueprint.parent), env.get("PYTHONPATH", "")) if p
        )
        for name in self.verified.streamlets:
            command = [
                sys.executable,
                "-m",
                "firesteel.pipelines.process",
                str(self.blueprint),
                name,
                "--work",
                str(self.work),
            ]
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
                    env={**env, **self.environment.get(name, {})},
                    start_new_session=True,
                )
            logger.info("streamlet %s started (pid %d)", name, self.processes[name].pid)

    def wait(self) -> int:
        """Run until stopped (0) or until a streamlet fails (1, its log named)."""
        previous = signal.signal(signal.SIGTERM, self._on_signal)
        try:
            while not self._stopping:
                for name, process in self.processes.items():
                    code = process.poll()
                    if code is not None:
                        logger.error(
                            "streamlet %s exited with %d: see %s", name, code, self.log_path(name)
                        )
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
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for name, process in self.processes.items():
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("streamlet %s did not stop in time: killing it", name)
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
