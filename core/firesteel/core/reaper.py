"""No child outlives the process that started it, even one killed by SIGKILL.

A process started in a session of its own (a streamlet of the pipelines runner, a
Kafka broker or an S3 server of the test suite) is out of reach of a signal to its
parent's group, and when the parent dies no handler of its runs: the child lives on,
orphaned. A :class:`Reaper` starts one small process (this file run as a script) in a
session of its own and tells it, on a pipe, each child
it must guard (``+PID START``) or may forget (``-PID``). When the pipe ends, because
the owner stopped or died, the reaper SIGKILLs every guarded child still running (its
whole process group when it leads one) and exits.

A guarded child is recognised by its PID *and* its start time (read from ``/proc``
where there is one), so a PID the kernel recycled for a stranger is never killed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger(__name__)


def start_time(pid: int) -> str:
    """The start time of process ``pid`` in clock ticks since boot ('' where ``/proc`` is
    absent or the process is gone): with the PID it names one process for good."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # The command name (field 2) may hold spaces and parentheses: count from its end.
    return stat.rsplit(")", 1)[-1].split()[19]


def reap(lines: Iterable[str]) -> list[int]:
    """Follow ``+PID START`` / ``-PID`` lines until they end, then SIGKILL each guarded
    process still running as the one guarded (its group when it leads one), and what is
    left of the group of a guarded leader that died; returns the PIDs (group ids) killed."""
    guarded: dict[int, str] = {}
    for line in lines:
        fields = line.split()
        if not fields or not fields[0][1:].isdigit():
            continue
        pid = int(fields[0][1:])
        if fields[0][0] == "+":
            guarded[pid] = fields[1] if len(fields) > 1 else ""
        elif fields[0][0] == "-":
            guarded.pop(pid, None)
    killed = []
    for pid, started in guarded.items():
        now = start_time(pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if now == started:
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
            elif now == "":
                # The leader is gone but its group may live on (a streamlet's JVM after its
                # driver died). The kernel hands out no PID equal to a live group's id, so
                # a group with this id can only be the one the leader left.
                os.killpg(pid, signal.SIGKILL)
            else:
                continue
            killed.append(pid)
    return killed


class Reaper:
    """The owner's side: :meth:`guard` and :meth:`release` children; the reaper process
    starts with the first guard. Safe to share between threads."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def guard(self, pid: int) -> None:
        """Have process ``pid`` SIGKILLed (with its group, when it leads one) if this
        process dies before calling :meth:`release` for it."""
        self._send(f"+{pid} {start_time(pid)}")

    def release(self, pid: int) -> None:
        """Forget process ``pid`` (it was stopped, or may outlive this process)."""
        self._send(f"-{pid}")

    def close(self) -> None:
        """End the pipe: the reaper kills what is still guarded and exits."""
        with self._lock:
            process, self._process = self._process, None
        if process is not None and process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
            process.wait()

    def _send(self, line: str) -> None:
        with self._lock:
            if self._process is None:
                # Run as a file, not ``-m firesteel.core.reaper``: the package's import
                # would load PySpark and pyarrow into a process that needs neither
                # (about 70 MB PSS against 7).
                self._process = subprocess.Popen(
                    [sys.executable, "-I", __file__],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    text=True,
                    start_new_session=True,
                )
            if self._process.stdin is None:
                return
            try:
                self._process.stdin.write(f"{line}\n")
                self._process.stdin.flush()
            except BrokenPipeError:
                logger.warning(
                    "the reaper (pid %d) is gone: children would outlive a killed parent",
                    self._process.pid,
                )


if __name__ == "__main__":
    # The owner's Ctrl-C reaches its terminal's foreground group; the reaper waits for
    # the pipe to end instead, so it never leaves before the children it guards.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    reap(sys.stdin)
