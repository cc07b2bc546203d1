"""The main example job (``firesteel demo``) end to end, as a user runs it: a subprocess.

Runs it on generated readings, checks the printed report and the committed
output against statistics computed here from the input files, then adds files
and runs it again: the statistics continue from the saved keyed state.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from firesteel.examples.demo import generate_readings, latest_per_sensor
from firesteel.testing.jvm import quick_start_env

# Minutes each (a whole demo job twice): handed out first, left out of `make test-fast`.
pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


def _run_demo(folder: Path) -> str:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "firesteel.examples.demo",
            "--dir",
            str(folder),
            "--files",
            "6",
            "--readings",
            "40",
            "--sensors",
            "5",
            "--files-per-batch",
            "2",
        ],
        capture_output=True,
        text=True,
        env=quick_start_env(),
        timeout=540,
        check=False,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    return done.stdout


def _expected(inputs: Path) -> dict[str, dict[str, Any]]:
    readings: dict[str, list[float]] = {}
    for path in sorted(inputs.glob("*.json")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            readings.setdefault(record["sensor"], []).append(record["temperature"])
    return {
        sensor: {"count": len(v), "mean": sum(v) / len(v), "min": min(v), "max": max(v)}
        for sensor, v in readings.items()
    }


def _check(folder: Path) -> None:
    latest = {row["sensor"]: row for row in latest_per_sensor(str(folder / "output"))}
    expected = _expected(folder / "input")
    assert set(latest) == set(expected)
    for sensor, stats in expected.items():
        row = latest[sensor]
        assert row["count"] == stats["count"], sensor
        assert math.isclose(row["mean"], stats["mean"], rel_tol=1e-9), sensor
        assert (row["min"], row["max"]) == (stats["min"], stats["max"]), sensor


def test_demo_counts_every_reading_once_and_resumes_from_state_on_more_input(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "demo"
    first = _run_demo(folder)
    assert "generated 240 readings from 5 sensors in 6 files" in first
    assert "batch 2: 80 readings" in first
    assert "guarantee: exactly-once" in first
    assert f"output (Parquet, one row per sensor per batch): {folder / 'output'}" in first
    _check(folder)

    more = tmp_path / "more"
    generate_readings(more, files=2, per_file=40, sensors=5, seed=7)
    for index, path in enumerate(sorted(more.glob("*.json"))):
        path.rename(folder / "input" / f"readings-extra-{index}.json")
    second = _run_demo(folder)
    assert "reading sensor files from" in second
    assert "batch 3: 80 readings" in second
    _check(folder)
