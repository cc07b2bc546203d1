"""A local Spark standalone cluster (a master and workers) started from the PySpark wheel.

::

    with StandaloneCluster(tmp_path / "cluster") as cluster:
        harness = CrashHarness(tmp_path / "h", master=cluster.master_url)
        harness.run(job, args, kills=[at_random((5, 10), target="executor")])

Every process is started in its own session and stopped by PID (its whole
tree, executors included) in :meth:`StandaloneCluster.stop`. Everything binds
to 127.0.0.1.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from firesteel.testing.harness import HarnessError
from firesteel.testing.jobs import QUICK_START_JVM
from firesteel.testing.ports import free_port
from firesteel.testing.processes import (
    find_executors,
    kill_process_and_descendants,
    spawn_logged,
)

logger = logging.getLogger(__name__)

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    """The Spark distribution inside the installed PySpark wheel."""
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class StandaloneCluster:
    """A master and ``workers`` workers (``cores`` cores, ``memory`` each) on 127.0.0.1."""

    workdir: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    start_timeout: float = 90.0
    master_port: int = 0
    processes: list[psutil.Process] = field(default_factory=list)
    _popens: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<port>``, the master a job connects to."""
        return f"spark://127.0.0.1:{self.master_port}"

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        # As for the harness's jobs: a stopped or killed daemon's scratch folders
        # (spark-*, blockmgr-*) stay in the workdir, not in /tmp (Java ignores TMPDIR),
        # and the master and workers, which only hand out executors, start on C1.
        daemon_options = (
            f"{env.get('SPARK_DAEMON_JAVA_OPTS', '')} {QUICK_START_JVM}"
            f" -Djava.io.tmpdir={self.workdir / 'tmp'}"
        )
        env.update(
            {
                "SPARK_HOME": str(spark_home()),
                "SPARK_LOCAL_IP": "127.0.0.1",
                "PYSPARK_PYTHON": env.get("PYSPARK_PYTHON", sys.executable),
                "SPARK_WORKER_DIR": str(self.workdir / "work"),
                "SPARK_LOCAL_DIRS": str(self.workdir / "spark-local"),
                "SPARK_DAEMON_JAVA_OPTS": daemon_options.strip(),
            }
        )
        return env

    def _spawn(self, name: str, args: list[str]) -> Path:
        log = self.workdir / f"{name}.log"
        command = [str(spark_home() / "bin" / "spark-class"), *args]
        proc = spawn_logged(command, log, self._env())
        self._popens.append(proc)
        self.processes.append(psutil.Process(proc.pid))
        return log

    def _wait_for(self, log: Path, text: str, count: int = 1) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            content = log.read_text(errors="replace") if log.exists() else ""
            if content.count(text) >= count:
                return
            if any(p.poll() is not None for p in self._popens):
                break
            time.sleep(0.3)
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        self.stop()
        msg = f"standalone cluster: {log.name} never said {text!r}:\n{tail}"
        raise HarnessError(msg)

    def start(self) -> None:
        """Start the master, then the workers; return once every worker registered."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "work").mkdir(exist_ok=True)
        (self.workdir / "tmp").mkdir(exist_ok=True)
        if not self.master_port:
            self.master_port = free_port()
        master_log = self._spawn(
            "master",
            [
                MASTER_CLASS,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.master_port),
                "--webui-port",
                "0",
            ],
        )
        self._wait_for(master_log, "I have been elected leader")
        for index in range(self.workers):
            self._spawn(
                f"worker-{index}",
                [
                    WORKER_CLASS,
                    self.master_url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--webui-port",
                    "0",
                    "--work-dir",
                    str(self.workdir / "work"),
                ],
            )
        self._wait_for(master_log, "Registering worker", count=self.workers)
        logger.info("standalone cluster up at %s", self.master_url)

    def executors(self) -> list[psutil.Process]:
        """Executor JVMs currently running under this cluster's workers."""
        workers = {p.pid for p in self.processes[1:]}
        found = []
        for proc in find_executors():
            try:
                if proc.ppid() in workers:
                    found.append(proc)
            except psutil.NoSuchProcess:
                continue
        return found

    def kill_executor(self) -> list[int]:
        """SIGKILL one executor (and its Python workers); return the PIDs killed."""
        executors = self.executors()
        if not executors:
            msg = f"standalone cluster {self.master_url} runs no executor to kill"
            raise HarnessError(msg)
        return kill_process_and_descendants(executors[0])

    def stop(self) -> None:
        """Kill every cluster process and its descendants (executors), by PID, and wait."""
        for proc in reversed(self.processes):
            kill_process_and_descendants(proc)
        for popen in self._popens:
            popen.wait()
        self.processes.clear()
        self._popens.clear()
