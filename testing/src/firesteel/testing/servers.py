"""A store's emulator as a process on 127.0.0.1: started on a free port, stopped by PID.

The shared part of :class:`~firesteel.testing.s3.S3Server` (moto) and the GCS and
Azure emulators of :mod:`firesteel.testing.emulators`: each says how it is
started and where it answers; this starts it, waits until it answers and kills
its process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from firesteel.testing.ports import free_port
from firesteel.testing.processes import REAPER, spawn_logged

START_TIMEOUT_S = 30.0
PORT_ATTEMPTS = 3
"""Ports a first start tries when another process took the one chosen (see ``start``)."""


class PortTakenError(RuntimeError):
    """The server exited because another process had bound its port first."""


class ServerProcess(ABC):
    """One emulator process; the log of its output is ``<workdir>/<log_name>``."""

    name: ClassVar[str]
    """What the emulator is, in errors."""
    log_name: ClassVar[str] = "server.log"
    probe: ClassVar[str] = "/"
    """The path whose answer (any HTTP status) means the server is up."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        """The server's output."""
        return self.workdir / self.log_name

    @abstractmethod
    def command(self) -> list[str]:
        """The command line starting the server on :attr:`port`."""

    def environment(self) -> dict[str, str]:
        """The server's environment."""
        return dict(os.environ)

    def start(self) -> ServerProcess:
        """Start the server (on a free port the first time, then on the same one) and wait
        until it answers.

        A free port is only free until someone binds it: on a busy machine another
        process can take it between :func:`free_port` and the server's own bind. A
        first start that fails so (``EADDRINUSE`` in its log) tries another port, up to
        :data:`PORT_ATTEMPTS` in all; a restart keeps its port, which clients know.
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.port:
            return self._start()
        attempts = PORT_ATTEMPTS
        while True:
            self.port = free_port()
            try:
                return self._start()
            except PortTakenError:
                attempts -= 1
                if not attempts:
                    raise

    def _start(self) -> ServerProcess:
        self.process = spawn_logged(self.command(), self.log, self.environment())
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = self.log.read_text(errors="replace")[-2000:]
                msg = f"the {self.name} exited with {self.process.returncode}: {log}"
                self.stop()
                if "EADDRINUSE" in log or "ddress already in use" in log:
                    raise PortTakenError(msg)
                raise RuntimeError(msg)
            try:
                with urllib.request.urlopen(f"{self.endpoint}{self.probe}", timeout=2):
                    return self
            except urllib.error.HTTPError:
                return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        self.stop()
        msg = f"the {self.name} did not answer on {self.endpoint} within {START_TIMEOUT_S:.0f} s"
        raise RuntimeError(msg)

    def stop(self) -> None:
        """Kill the server by PID (its whole process group) and reap it."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        if self.process is not None:
            REAPER.release(self.process.pid)
        self.process = None
