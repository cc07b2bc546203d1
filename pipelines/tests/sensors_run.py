"""Running the example sensors pipeline in tests: its inputs, its output, its Kafka topics."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from firesteel.pipelines.runner import LocalRunner
from firesteel.testing.jobs import QUICK_START_JVM
from firesteel.testing.jvm import archive_option, driver_archive

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pipelines" / "sensors"
SENSORS = 3
PER_FILE = 10
TIMEOUT_S = 420.0


def quick_start() -> str:
    """The setting that starts each streamlet's driver JVM as the crash harness starts its
    jobs' (C1, the serial GC, the class-data archive): a run starts three of them."""
    flags = f"{QUICK_START_JVM} {archive_option(driver_archive())}".strip()
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


def kafka_published(
    bootstrap: str, topic: str, request: pytest.FixtureRequest
) -> Callable[[], bool]:
    """Whether a transaction has committed on ``topic`` (its log has grown)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "pipeline-crash-test"})
    request.addfinalizer(consumer.close)

    def published() -> bool:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        try:
            return any(
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] > 0
                for p in partitions
            )
        except KafkaException:  # a new topic's leaders are still being elected
            return False

    return published


def kafka_example(folder: Path, suffix: str) -> Path:
    """A copy of the example whose blueprint puts its topics at names of this run's own."""
    folder.mkdir()
    (folder / "sensors.py").write_text((EXAMPLE / "sensors.py").read_text())
    blueprint = (EXAMPLE / "blueprint.conf").read_text()
    for key in ("sensor-readings", "sensor-metrics"):
        blueprint += f'blueprint.topics.{key}.topic.name = "{key}-{suffix}"\n'
    (folder / "blueprint.conf").write_text(blueprint)
    return folder / "blueprint.conf"


def wait_for_exit(runner: LocalRunner, streamlet: str) -> None:
    """Wait until ``streamlet``'s process has exited (killed by an armed fault point)."""
    deadline = time.monotonic() + TIMEOUT_S
    while runner.processes[streamlet].poll() is None:
        assert time.monotonic() < deadline, f"{streamlet} never reached its fault point"
        time.sleep(0.5)
