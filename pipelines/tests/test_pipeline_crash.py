"""The example pipeline on local and on Kafka topics, killed and restarted: every reading
counted once.

Three runs of ``LocalRunner`` (one process and SparkSession per streamlet):
the first loses its stateful streamlet to a SIGKILL at a random moment once
it has published a batch (the runner notices and stops the others); the
second is SIGKILLed whole (every streamlet at once) once the egress has
output; the third runs with another trigger interval and another Spark
shuffle-partition count until every reading is counted. The egress output is
read with pyarrow's dataset reader, not firesteel's: each sensor's final count
is its number of readings, and no (sensor, count) row appears twice.

On Kafka (the suite's broker) the test runs a copy of the example whose
blueprint names topics of its own, so no earlier run's records are read; a
streamlet's exactly-once Kafka outlet is then killed mid-transaction, and the
readings cross two Kafka hops.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from firesteel.pipelines.runner import LocalRunner

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pipelines" / "sensors"
SENSORS = 3
PER_FILE = 10
TIMEOUT_S = 420.0

pytestmark = pytest.mark.crash


def _write_inputs(folder: Path, first: int, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(first, first + count):
        lines = [
            json.dumps({"sensor": f"s{seq % SENSORS}", "seq": seq, "value": float(seq)})
            for seq in range(index * PER_FILE, (index + 1) * PER_FILE)
        ]
        hidden = folder / f".part-{index:04d}.json"
        hidden.write_text("\n".join(lines) + "\n")
        hidden.rename(folder / f"part-{index:04d}.json")


def _rows(folder: Path) -> list[dict[str, object]]:
    if not any(folder.glob("*.parquet")):
        return []
    return ds.dataset(folder, format="parquet").to_table().to_pylist()


def _wait(runner: LocalRunner, done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not done():
        for name, process in runner.processes.items():
            code = process.poll()
            assert code is None, f"streamlet {name} exited with {code}: {runner.log_path(name)}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _kill(runner: LocalRunner, *names: str) -> None:
    for name in names:
        os.killpg(runner.processes[name].pid, signal.SIGKILL)
        runner.processes[name].wait()


def _kafka_published(
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


def _kafka_example(folder: Path, suffix: str) -> Path:
    """A copy of the example whose blueprint puts its topics at names of this run's own."""
    folder.mkdir()
    (folder / "sensors.py").write_text((EXAMPLE / "sensors.py").read_text())
    blueprint = (EXAMPLE / "blueprint.conf").read_text()
    for key in ("sensor-readings", "sensor-metrics"):
        blueprint += f'blueprint.topics.{key}.topic.name = "{key}-{suffix}"\n'
    (folder / "blueprint.conf").write_text(blueprint)
    return folder / "blueprint.conf"


@pytest.mark.parametrize("topics", ["local", "kafka"])
def test_every_reading_counted_once_across_kills_and_a_changed_configuration(
    tmp_path: Path, topics: str, request: pytest.FixtureRequest
) -> None:
    inputs, output, work = tmp_path / "in", tmp_path / "out", tmp_path / "work"
    settings = [
        f"firesteel.streamlets.readings.config-parameters.input-dir = {inputs}",
        f"firesteel.streamlets.store.config-parameters.output-dir = {output}",
        "firesteel.runtimes.spark.checkpointing.interval = 1s",
    ]
    if topics == "kafka":
        bootstrap = request.getfixturevalue("bootstrap")
        suffix = tmp_path.name
        blueprint = _kafka_example(tmp_path / "example", suffix)
        settings.append(f'firesteel.kafka.bootstrap.servers = "{bootstrap}"')
        published = _kafka_published(bootstrap, f"sensor-metrics-{suffix}", request)
    else:
        blueprint = EXAMPLE / "blueprint.conf"
        metrics_topic = work / "topics" / "sensor-metrics"

        def published() -> bool:
            return any(metrics_topic.glob("*.parquet"))

    _write_inputs(inputs, 0, 6)

    first = LocalRunner(blueprint, work, settings=settings)
    first.start()
    try:
        _wait(first, published, "metrics to publish")
        time.sleep(random.uniform(0, 3))
        _kill(first, "metrics")
        assert first.wait() == 1
    finally:
        first.stop()

    _write_inputs(inputs, 6, 3)
    second = LocalRunner(blueprint, work, settings=settings)
    second.start()
    try:
        seen = len(_rows(output))
        _wait(second, lambda: len(_rows(output)) > seen, "the egress to write")
        _kill(second, *second.processes)
    finally:
        second.stop()

    readings = 9 * PER_FILE
    changed = [
        *settings,
        "firesteel.runtimes.spark.checkpointing.interval = 3s",
        'firesteel.runtimes.spark.config { "spark.sql.shuffle.partitions" = 3 }',
    ]
    third = LocalRunner(blueprint, work, settings=changed)
    third.start()
    try:

        def counted() -> bool:
            rows = _rows(output)
            return (
                sum(
                    max((r["count"] for r in rows if r["sensor"] == s), default=0)
                    for s in {r["sensor"] for r in rows}
                )
                >= readings
            )

        _wait(third, counted, "every reading to be counted")
    finally:
        third.stop()

    rows = _rows(output)
    final = {
        s: max(r["count"] for r in rows if r["sensor"] == s) for s in {r["sensor"] for r in rows}
    }
    assert final == {f"s{i}": readings // SENSORS for i in range(SENSORS)}
    repeated = [key for key, n in Counter((r["sensor"], r["count"]) for r in rows).items() if n > 1]
    assert repeated == []
    means = {r["sensor"]: r["mean"] for r in rows if r["count"] == readings // SENSORS}
    assert means == {
        f"s{i}": sum(range(i, readings, SENSORS)) / (readings // SENSORS) for i in range(SENSORS)
    }
