"""A Spark Connect server started from the PySpark wheel, on 127.0.0.1, stopped by PID.

::

    with ConnectServer(tmp_path / "connect") as server:
        run_client(server.url)  # SparkSession.builder.remote(server.url) in another process

The server is what ``sbin/start-connect-server.sh`` of the wheel starts
(``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer``),
run in the foreground so it can be stopped by PID. It runs the queries of its
clients: firesteel and the ``PYSPARK_PYTHON`` its Python workers start belong
here, and every path a client names is the server's. A client is a process of
its own: PySpark refuses a Connect session beside a classic one in one process.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from firesteel.testing.cluster import spark_home
from firesteel.testing.daemon import DAEMON_CONFIG
from firesteel.testing.harness import HarnessError
from firesteel.testing.jobs import QUICK_START_JVM
from firesteel.testing.ports import await_listening, free_port
from firesteel.testing.processes import kill_process_and_descendants, spawn_logged

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
"""The server's main class; ``spark-submit`` needs no application jar for it."""

SERVER_SETTINGS = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.connect.grpc.binding.address": "127.0.0.1",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.python.worker.reuse": "true",
    **DAEMON_CONFIG,
}
"""The server's settings besides its port: everything on 127.0.0.1, a small job's
partitions, workers forked from :mod:`firesteel.testing.daemon`."""


def connect_jar() -> Path:
    """The Spark Connect server's jar shipped in the PySpark wheel; :class:`HarnessError`
    naming the folder when the wheel has none (a PySpark older than 4.0)."""
    jars = spark_home() / "jars"
    found = sorted(jars.glob("spark-connect_*.jar"))
    if not found:
        msg = f"no spark-connect_*.jar in {jars}: Spark Connect needs PySpark 4.0 or later"
        raise HarnessError(msg)
    return found[-1]


@dataclass
class ConnectServer:
    """A Spark Connect server on ``master`` (``local[2]``), its log in ``workdir``."""

    workdir: Path
    master: str = "local[2]"
    start_timeout: float = 120.0
    port: int = 0
    settings: dict[str, str] = field(default_factory=dict)
    """Settings applied after :data:`SERVER_SETTINGS`."""
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``sc://127.0.0.1:<port>``, what a client gives ``SparkSession.builder.remote``."""
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        """The server's output."""
        return self.workdir / "connect-server.log"

    def __enter__(self) -> ConnectServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def command(self) -> list[str]:
        """The ``spark-submit`` command line of the server."""
        temp = self.workdir / "tmp"
        settings = {
            **SERVER_SETTINGS,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.local.dir": str(temp),
            **self.settings,
        }
        command = [
            str(spark_home() / "bin" / "spark-submit"),
            "--class",
            SERVER_CLASS,
            "--master",
            self.master,
            "--name",
            "firesteel-connect-server",
            "--driver-java-options",
            f"{QUICK_START_JVM} -Djava.io.tmpdir={temp}",
        ]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        return command

    def environment(self) -> dict[str, str]:
        """This process's environment, with the Python of its Spark workers: the server
        runs every Python task of its clients' queries, so that Python needs firesteel."""
        env = dict(os.environ)
        env["SPARK_HOME"] = str(spark_home())
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("PYSPARK_DRIVER_PYTHON", env["PYSPARK_PYTHON"])
        return env

    def start(self) -> ConnectServer:
        """Start the server and return once it accepts connections."""
        connect_jar()
        (self.workdir / "tmp").mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        self.process = spawn_logged(self.command(), self.log, self.environment())
        try:
            await_listening(
                self.process,
                self.port,
                self.start_timeout,
                what="the Spark Connect server",
                log=self.log,
            )
        except Exception:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Kill the server and its Python workers by PID, and reap it."""
        if self.process is None:
            return
        with contextlib.suppress(psutil.NoSuchProcess):
            kill_process_and_descendants(psutil.Process(self.process.pid))
        self.process.wait(timeout=30)
        self.process = None
