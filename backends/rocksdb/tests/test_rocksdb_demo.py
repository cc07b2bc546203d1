"""``firesteel demo --backend rocksdb`` as a user runs it, then ``firesteel state`` on it.

Once, not twice as the filesystem demo's test runs it: a run restored from
RocksDB's incremental checkpoint in a new process is what the RocksDB crash
test does at every restart (issue 30: one JVM start less).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from firesteel.examples.demo import latest_per_sensor
from firesteel.testing.jvm import quick_start_env

# A minute or more (a whole demo job): handed out first, left out of `make test-fast`.
pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


def _run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        env=quick_start_env(),
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    return done.stdout


def _demo(folder: Path) -> str:
    return _run(
        "firesteel.examples.demo",
        "--dir",
        str(folder),
        "--files",
        "4",
        "--readings",
        "30",
        "--sensors",
        "4",
        "--files-per-batch",
        "2",
        "--backend",
        "rocksdb",
    )


def _counts(inputs: Path) -> Counter[str]:
    return Counter(
        json.loads(line)["sensor"]
        for path in inputs.glob("*.json")
        for line in path.read_text().splitlines()
    )


def test_demo_on_rocksdb_counts_every_reading_and_can_be_inspected(tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    first = _demo(folder)
    assert "guarantee: exactly-once" in first
    assert f"keyed state (rocksdb backend): {folder / 'state'}" in first
    assert "batch 1: 60 readings" in first
    latest = {row["sensor"]: row["count"] for row in latest_per_sensor(str(folder / "output"))}
    assert latest == dict(_counts(folder / "input"))

    printed = _run("firesteel.cli.main", "state", str(folder / "state"))
    assert "(4 entries)" in printed  # 4 sensors' counts; firesteel's batch clock is hidden
    everything = _run("firesteel.cli.main", "state", str(folder / "state"), "--all")
    assert "(5 entries)" in everything and "__firesteel_clock__" in everything
    assert all(f'["{sensor}"]' in printed for sensor in latest)
    assert '"count": ' + str(latest["sensor-000"]) in printed
