"""One side's job as a measured process: launched, watched from outside, stopped.

A job script says what it is doing by printing JSON lines on stdout, ``{"event":
"ready"}`` once its engine is up (a Spark session, a Quix application, a Flink
environment) and before it reads its input; anything else it prints is kept for
the error message. While it runs, a thread samples the memory of the whole
process tree (the script, a JVM it started, Spark's Python workers) every
:data:`SAMPLE_S` seconds and keeps two peaks: the sum of RSS, which counts a page
that processes share (Python workers forked from one daemon, shared libraries)
once per process, as ``ps`` shows it, and the sum of PSS (proportional set size:
a shared page split among its sharers), which adds up to what the tree costs the
machine. The same rules for every side.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import psutil

SAMPLE_S = 0.25
MB = 2**20


class JobError(RuntimeError):
    """A side's job failed, or did not get ready or finish in time."""


def parse_event(line: str) -> dict[str, object] | None:
    """The event a job printed on ``line``, or None for any other output."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        event = json.loads(text)
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) and "event" in event else None


def tree_memory(root: psutil.Process) -> tuple[int, int]:
    """Resident bytes (RSS) and proportional bytes (PSS) of ``root`` and all its
    descendants alive now, each summed over the processes."""
    rss = pss = 0
    try:
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0
    for process in processes:
        try:
            full = process.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        rss += full.rss
        pss += full.pss
    return rss, pss


class Job:
    """``command`` running in its own process group, with its events and peak memory.

    Times are ``time.perf_counter()`` values: :attr:`launched` when the process was
    started, :attr:`ready` when its ``ready`` event arrived.
    """

    def __init__(
        self, command: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.command = list(command)
        self.cwd = cwd
        self.env = env
        self.launched = 0.0
        self.ready: float | None = None
        self.peak_rss = 0
        self.peak_pss = 0
        self.output: list[str] = []
        self._ready = threading.Event()
        self._done = threading.Event()
        self._threads: list[threading.Thread] = []
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> Job:
        self.launched = time.perf_counter()
        self._process = subprocess.Popen(
            self.command,
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._threads = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._sample, daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def peak_rss_mb(self) -> float:
        return self.peak_rss / MB

    @property
    def peak_pss_mb(self) -> float:
        return self.peak_pss / MB

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            event = parse_event(line)
            if event is not None and event["event"] == "ready" and self.ready is None:
                self.ready = time.perf_counter()
                self._ready.set()
            elif event is None:
                self.output = [*self.output[-200:], line.rstrip()]
        self._ready.set()

    def _sample(self) -> None:
        assert self._process is not None
        root = psutil.Process(self._process.pid)
        while not self._done.is_set() and self._process.poll() is None:
            rss, pss = tree_memory(root)
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
            self._done.wait(SAMPLE_S)

    def _failure(self, what: str) -> JobError:
        tail = "\n".join(self.output[-30:])
        return JobError(f"{' '.join(self.command[:4])}...: {what}; its last output:\n{tail}")

    def wait_ready(self, timeout: float) -> float:
        """Seconds from launch to the ``ready`` event; raises when the job ended first."""
        self._ready.wait(timeout)
        if self.ready is None:
            raise self._failure(f"not ready within {timeout:g} s")
        return self.ready - self.launched

    def wait_exit(self, timeout: float) -> float:
        """The time the job exited (it must exit with status 0)."""
        assert self._process is not None
        try:
            code = self._process.wait(timeout)
        except subprocess.TimeoutExpired as exc:
            raise self._failure(f"still running after {timeout:g} s") from exc
        ended = time.perf_counter()
        self._threads[0].join(10)
        if code != 0:
            raise self._failure(f"exited with status {code}")
        return ended

    def check(self, may_end: bool = False) -> None:
        """Raise when the job failed, or ended while it should run (unless ``may_end``)."""
        assert self._process is not None
        code = self._process.poll()
        if code is not None and (code != 0 or not may_end):
            self._threads[0].join(10)
            raise self._failure(f"ended with status {code}")

    def running(self) -> bool:
        """Whether the job still runs; raises, as :meth:`check`, when it failed."""
        assert self._process is not None
        self.check(may_end=True)
        return self._process.poll() is None

    def stop(self) -> None:
        """SIGKILL the job's process group (it and everything it started), then reap it."""
        self._done.set()
        if self._process is None:
            return
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait(30)
        for thread in self._threads:
            thread.join(10)
