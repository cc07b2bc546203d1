"""Finding and killing every process a test job started, by PID.

A Spark job is not one process tree: the driver's JVM starts ``pyspark.daemon``,
which calls ``setpgid`` and forks the Python workers into a group of its own,
and a process whose parent died is re-parented to init, out of reach of
``children()``. :class:`ProcessTracker` therefore remembers every descendant it
ever saw (PID plus creation time, so a recycled PID is never mistaken for
ours) and also recognises the job's processes by a token in their initial
environment, which every descendant inherits (and executors on a standalone
cluster receive through ``spark.executorEnv``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from firesteel.core.errors import MissingDependencyError
from firesteel.core.reaper import Reaper

try:
    import psutil
except ImportError as exc:
    package, distribution = "psutil", "firesteel[test]"
    raise MissingDependencyError(package, distribution) from exc

logger = logging.getLogger(__name__)

REAPER = Reaper()
"""Guards every server, broker, cluster daemon and job this process starts: should the
process die without stopping them (a killed test run), they are SIGKILLed with it."""

TOKEN_ENV = "FIRESTEEL_HARNESS_RUN"
"""Environment variable carrying the id of one harness run into every process of the job."""


def spawn_logged(
    command: Sequence[str], log: Path, env: Mapping[str, str]
) -> subprocess.Popen[bytes]:
    """Start ``command`` in a session (and process group) of its own, stdout and stderr
    into the file ``log``, no stdin; so it can be killed as a group without touching us.
    :data:`REAPER` guards it."""
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    REAPER.guard(process.pid)
    return process


def _matches_token(proc: psutil.Process, token: str) -> bool:
    try:
        return proc.environ().get(TOKEN_ENV) == token
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return False


def processes_with_token(token: str) -> list[psutil.Process]:
    """Live processes whose initial environment carries ``token`` in :data:`TOKEN_ENV`."""
    own_uid = os.getuid()
    found = []
    for proc in psutil.process_iter(["uids"]):
        uids = proc.info.get("uids")
        if uids is not None and uids.real != own_uid:
            continue
        if _matches_token(proc, token):
            found.append(proc)
    return found


@dataclass
class ProcessTracker:
    """Every process of one job run: the root, its descendants, and token bearers.

    Call :meth:`refresh` now and then while the job runs (the harness does every
    :data:`~firesteel.testing.harness.TRACK_SECONDS`), so that descendants are
    recorded before a crash orphans them; :meth:`kill_all` then reaches them even
    after their parent died, and finds the rest by their token.
    """

    root: psutil.Process
    token: str
    seen: dict[int, float] = field(default_factory=dict)
    """PID -> creation time of every process ever seen in the job."""

    def _remember(self, proc: psutil.Process) -> None:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
            self.seen.setdefault(proc.pid, proc.create_time())

    def refresh(self, scan_tokens: bool = True) -> None:
        """Record the current descendants of the root (and, if asked, all token bearers)."""
        with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
            self._remember(self.root)
            for child in self.root.children(recursive=True):
                self._remember(child)
        if scan_tokens:
            for proc in processes_with_token(self.token):
                self._remember(proc)
                with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
                    for child in proc.children(recursive=True):
                        self._remember(child)

    def alive(self) -> list[psutil.Process]:
        """Processes recorded so far that still run (same PID *and* creation time)."""
        live = []
        for pid, created in self.seen.items():
            try:
                proc = psutil.Process(pid)
                if proc.create_time() == created and not gone(proc):
                    live.append(proc)
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
        return live

    def descendants(self) -> list[psutil.Process]:
        """The root's live descendants, found through the tree (not the token)."""
        try:
            return self.root.children(recursive=True)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return []

    def kill_tree(self) -> None:
        """SIGKILL the root's process group and every descendant recorded so far.

        The descendants are collected *before* anything is killed, so that
        processes in other process groups (``pyspark.daemon``) are still
        reachable through their parents.
        """
        self.refresh(scan_tokens=False)
        victims = self.alive()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.root.pid, signal.SIGKILL)
        _kill(victims)

    def kill_all(self, timeout: float = 60.0) -> None:
        """Kill the tree and every token bearer, and wait until none of them runs.

        Raises :class:`TimeoutError` naming the survivors if they outlive ``timeout``.
        """
        deadline = time.monotonic() + timeout
        self.kill_tree()
        while True:
            self.refresh()
            survivors = self.alive()
            if not survivors:
                return
            _kill(survivors)
            still = wait_gone(survivors, timeout=1.0)
            if not still:
                continue
            if time.monotonic() > deadline:
                names = ", ".join(f"{p.pid}" for p in still)
                msg = f"processes of harness run {self.token} survive SIGKILL: {names}"
                raise TimeoutError(msg)


def wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to ``timeout`` s for ``procs`` to end; return those still running.

    A zombie counts as ended: it runs no code and holds no resource but its
    process-table entry, and where PID 1 of a container does not reap orphans
    (CI's does not) a killed JVM stays a zombie for good, which
    :func:`psutil.wait_procs` reports as alive.
    """
    deadline = time.monotonic() + timeout
    while True:
        _, alive = psutil.wait_procs(procs, timeout=min(1.0, max(0.0, deadline - time.monotonic())))
        running = [p for p in alive if not gone(p)]
        if not running or time.monotonic() >= deadline:
            return running
        procs = running


def gone(proc: psutil.Process | int) -> bool:
    """Whether the process (or PID) has ended: exited, or a zombie (:func:`wait_gone`)."""
    try:
        process = proc if isinstance(proc, psutil.Process) else psutil.Process(proc)
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _kill(procs: list[psutil.Process]) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
            proc.send_signal(signal.SIGKILL)


def find_executors(token: str | None = None) -> list[psutil.Process]:
    """Live Spark executor JVMs (``CoarseGrainedExecutorBackend``), optionally of one run."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if not any("CoarseGrainedExecutorBackend" in part for part in cmdline):
            continue
        if token is None or _matches_token(proc, token):
            found.append(proc)
    return found


def kill_process_and_descendants(proc: psutil.Process) -> list[int]:
    """SIGKILL ``proc`` and its descendants (collected first); return their PIDs."""
    try:
        victims = [proc, *proc.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return []
    _kill(victims)
    wait_gone(victims, timeout=30)
    return [p.pid for p in victims]
