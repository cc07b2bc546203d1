"""Running the example sensors pipeline in tests: its inputs, its output, its Kafka topics."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.dataset as ds

from firesteel.pipelines.runner import LocalRunner
from firesteel.testing.jvm import quick_start_flags

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pipelines" / "sensors"
SENSORS = 3
PER_FILE = 10
TIMEOUT_S = 420.0


def quick_start() -> str:
    """The setting that starts each streamlet's driver JVM as the crash harness starts its
    jobs' (C1, the serial GC, the class-data archive): a run starts three of them."""
    flags = quick_start_flags()
    return f'firesteel.runtimes.spark.config {{ "spark.driver.extraJavaOptions" = "{flags}" }}'


def write_inputs(folder: Path, first: int, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(first, first + count):
        lines = [
            json.dumps({"sensor": f"s{seq % SENSORS}", "seq": seq, "value": float(seq)})
            for seq in range(index * PER_FILE, (index + 1) * PER_FILE)
        ]
        hidden = folder / f".part-{index:04d}.json"
        hidden.write_text("\n".join(lines) + "\n")
        hidden.rename(folder / f"part-{index:04d}.json")


def output_rows(folder: Path) -> list[dict[str, object]]:
    if not any(folder.glob("*.parquet")):
        return []
    return ds.dataset(folder, format="parquet").to_table().to_pylist()


def wait(runner: LocalRunner, done: Callable[[], bool], what: str) -> None:
    """Wait for ``done()`` while the runner supervises its streamlets (restarts the dead)."""
    deadline = time.monotonic() + TIMEOUT_S
    while not done():
        failed = runner.step()
        assert failed is None, f"streamlet {failed} stopped for good: {runner.log_path(failed)}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def kafka_example(folder: Path, suffix: str) -> Path:
    """A copy of the example whose blueprint puts its topics at names of this run's own."""
    folder.mkdir()
    (folder / "sensors.py").write_text((EXAMPLE / "sensors.py").read_text())
    blueprint = (EXAMPLE / "blueprint.conf").read_text()
    for key in ("sensor-readings", "sensor-metrics"):
        blueprint += f'blueprint.topics.{key}.topic.name = "{key}-{suffix}"\n'
    (folder / "blueprint.conf").write_text(blueprint)
    return folder / "blueprint.conf"
