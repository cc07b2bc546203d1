"""The fault hook fires exactly where and as often as FIRESTEEL_FAULT says, and kills hard."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from firesteel.core.faults import FAULT_ENV, KILL_ENV, MARKER_DIR_ENV

SCRIPT = """
import sys
from firesteel.core.faults import fault_point
for batch in range(5):
    for partition in range(2):
        fault_point("sink.after_write", batch, partition)
        print(batch, partition, flush=True)
"""


def run(spec: str, marker_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, FAULT_ENV: spec, KILL_ENV: "process", MARKER_DIR_ENV: str(marker_dir)}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize(
    ("spec", "printed"),
    [
        ("sink.after_write@2:1", ["0 0", "0 1", "1 0", "1 1", "2 0"]),
        ("sink.after_write@3", ["0 0", "0 1", "1 0", "1 1", "2 0", "2 1"]),
        ("sink.after_write", []),
    ],
)
def test_kills_with_sigkill_at_the_named_point(
    spec: str, printed: list[str], tmp_path: Path
) -> None:
    result = run(spec, tmp_path)
    assert result.returncode == -signal.SIGKILL
    assert result.stdout.splitlines() == printed


def test_fires_once_per_marker_dir(tmp_path: Path) -> None:
    assert run("sink.after_write@1", tmp_path).returncode == -signal.SIGKILL
    again = run("sink.after_write@1", tmp_path)
    assert again.returncode == 0
    assert len(again.stdout.splitlines()) == 10


def test_other_points_do_not_fire(tmp_path: Path) -> None:
    result = run("driver.after_commit@1,sink.after_write@9", tmp_path)
    assert result.returncode == 0
    assert len(result.stdout.splitlines()) == 10


def test_noop_without_environment(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    env.update({KILL_ENV: "process", MARKER_DIR_ENV: str(tmp_path)})
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    assert len(result.stdout.splitlines()) == 10
    assert not any(tmp_path.iterdir()), "no fault fired, so no marker may be written"
