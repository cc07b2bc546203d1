"""No child outlives its owner: :mod:`firesteel.core.reaper` and the test tooling's
servers, brokers and jobs guarded by it, their owner killed by SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from firesteel.core.reaper import reap, start_time
from firesteel.testing.processes import gone


def _owner(code: str) -> tuple[subprocess.Popen[str], int]:
    """Run ``code`` in a child Python that prints the PID of the process it started, then
    waits; return the owner and that PID."""
    owner = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    return owner, int(owner.stdout.readline())


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize(
    "code",
    [
        """
        import subprocess, sys, time
        from firesteel.core.reaper import Reaper
        child = subprocess.Popen(["sleep", "120"], start_new_session=True)
        Reaper().guard(child.pid)
        print(child.pid, flush=True)
        time.sleep(120)
        """,
        """
        import time
        from pathlib import Path
        from firesteel.testing.processes import spawn_logged
        child = spawn_logged(["sleep", "120"], Path("/dev/null"), {"PATH": "/usr/bin:/bin"})
        print(child.pid, flush=True)
        time.sleep(120)
        """,
    ],
    ids=["reaper", "spawn_logged"],
)
def test_a_guarded_child_in_its_own_session_dies_with_its_sigkilled_owner(code: str) -> None:
    owner, child = _owner(code)
    try:
        assert os.getpgid(child) == child, "the child leads a group of its own"
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        assert _gone_within(child, 10), f"process {child} outlived its SIGKILLed owner"
    finally:
        owner.kill()
        if not _gone_within(child, 0):
            os.kill(child, signal.SIGKILL)


def test_a_released_child_lives_on() -> None:
    sleeper = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        lines = [f"+{sleeper.pid} {start_time(sleeper.pid)}", f"-{sleeper.pid}"]
        assert reap(lines) == []
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_recycled_pid_is_never_killed() -> None:
    """A guarded PID whose start time differs is another process: the kernel recycled it."""
    sleeper = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        assert reap([f"+{sleeper.pid} 1"]) == []
        assert sleeper.poll() is None
        assert reap([f"+{sleeper.pid} {start_time(sleeper.pid)}"]) == [sleeper.pid]
        assert sleeper.wait(10) == -signal.SIGKILL
    finally:
        sleeper.kill()
        sleeper.wait()
