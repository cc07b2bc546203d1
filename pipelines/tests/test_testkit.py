"""The test kit runs one streamlet of the example pipeline on records given in memory."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pyspark import cloudpickle

from firesteel.pipelines.testkit import run_streamlet

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pipelines" / "sensors"
sys.path.insert(0, str(EXAMPLE))
import sensors  # noqa: E402

# Spark's Python workers cannot import the example module by name: ship it by value.
cloudpickle.register_pickle_by_value(sensors)


def test_a_stateful_streamlet_runs_on_in_memory_records(spark: Any, tmp_path: Path) -> None:
    readings = [
        {"sensor": "a", "seq": 0, "value": 1.0},
        {"sensor": "b", "seq": 1, "value": 10.0},
        {"sensor": "a", "seq": 2, "value": 3.0},
    ]
    out = run_streamlet(spark, sensors.Metrics, {"in": readings}, tmp_path)
    metrics = sorted(out["out"], key=lambda m: m["sensor"])
    assert metrics == [
        {"sensor": "a", "seq": 2, "count": 2, "mean": 2.0},
        {"sensor": "b", "seq": 1, "count": 1, "mean": 10.0},
    ]
