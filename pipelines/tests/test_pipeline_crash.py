"""The example pipeline on local and on Kafka topics, killed and restarted: every reading
counted once.

Three runs of ``LocalRunner`` (one process and SparkSession per streamlet):
the first, with supervision off, loses its stateful streamlet at a protocol
point of its outlet's sink (a fault point armed in that streamlet's process
only; the runner stops the others); in the second, supervised, the stateful
streamlet is SIGKILLed at a random moment once it has published a batch, the
runner restarts it and the readings so far are counted exactly, then the whole
pipeline is SIGKILLed (every streamlet at once) once the egress has more
output; the third, given one more input file while the pipeline was down,
runs with another trigger interval and another Spark shuffle-partition count
until every reading is counted. The egress output is read with pyarrow's
dataset reader, not firesteel's: each sensor's final count is its number of
readings, with its mean, and no (sensor, count) row appears twice.

On Kafka (the suite's broker) the test runs a copy of the example whose
blueprint names topics of its own, so no earlier run's records are read; a
streamlet's exactly-once Kafka outlet is then killed mid-transaction, and the
readings cross two Kafka hops.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from sensors_run import (
    EXAMPLE,
    PER_FILE,
    SENSORS,
    kafka_example,
    kafka_published,
    output_rows,
    quick_start,
    wait,
    wait_for_exit,
    write_inputs,
)

from firesteel.pipelines.runner import LocalRunner

pytestmark = pytest.mark.crash


def _kill(runner: LocalRunner, *names: str) -> None:
    for name in names:
        os.killpg(runner.processes[name].pid, signal.SIGKILL)
        runner.processes[name].wait()


@pytest.mark.parametrize("topics", ["local", "kafka"])
def test_every_reading_counted_once_across_kills_and_a_changed_configuration(
    tmp_path: Path, topics: str, request: pytest.FixtureRequest
) -> None:
    inputs, output, work = tmp_path / "in", tmp_path / "out", tmp_path / "work"
    settings = [
        f"firesteel.streamlets.readings.config-parameters.input-dir = {inputs}",
        f"firesteel.streamlets.store.config-parameters.output-dir = {output}",
        "firesteel.runtimes.spark.checkpointing.interval = 1s",
        quick_start(),
    ]
    if topics == "kafka":
        bootstrap = request.getfixturevalue("bootstrap")
        suffix = tmp_path.name
        blueprint = kafka_example(tmp_path / "example", suffix)
        settings.append(f'firesteel.kafka.bootstrap.servers = "{bootstrap}"')
        published = kafka_published(bootstrap, f"sensor-metrics-{suffix}", request)
    else:
        blueprint = EXAMPLE / "blueprint.conf"
        metrics_topic = work / "topics" / "sensor-metrics"

        def published() -> bool:
            return any(metrics_topic.glob("*.parquet"))

    write_inputs(inputs, 0, 3)
    # The stateful streamlet dies at a protocol point of its outlet's sink: on Kafka once a
    # task's transaction committed, before its vote (the batch is downstream, not in Spark's
    # commit log); on local topics inside the driver's commit, its manifest written, its
    # files not yet all published. The fault kills the streamlet's own process group.
    point = "kafka.after_commit_transaction" if topics == "kafka" else "driver.mid_commit"
    armed = {"FIRESTEEL_FAULT": point, "FIRESTEEL_FAULT_DIR": str(tmp_path / "faults")}
    at_point = LocalRunner(
        blueprint,
        work,
        settings=[*settings, "firesteel.supervision.restarts = 0"],
        environment={"metrics": armed},
    )
    at_point.start()
    try:
        wait_for_exit(at_point, "metrics")
        assert at_point.wait() == 1
    finally:
        at_point.stop()
    assert (tmp_path / "faults" / point).exists()

    # Under supervision (on by default) the runner restarts a streamlet SIGKILLed at a random
    # moment; the readings so far are then counted exactly, before the whole pipeline is
    # SIGKILLed with more input on its way.
    write_inputs(inputs, 3, 3)
    supervised = LocalRunner(blueprint, work, settings=settings)
    supervised.start()
    try:
        wait(supervised, published, "metrics to publish")
        time.sleep(random.uniform(0, 3))
        killed = supervised.processes["metrics"].pid
        _kill(supervised, "metrics")
        wait(
            supervised,
            lambda: (
                supervised.processes["metrics"].pid != killed and counted(output) >= 6 * PER_FILE
            ),
            "the restarted metrics",
        )
        assert supervised.restarts["metrics"].total == 1
        _assert_exact(output_rows(output), 6 * PER_FILE)

        write_inputs(inputs, 6, 2)
        seen = len(output_rows(output))
        wait(supervised, lambda: len(output_rows(output)) > seen, "the egress to write")
        _kill(supervised, *supervised.processes)
    finally:
        supervised.stop()

    # The last input arrives while the pipeline is down: the run with the changed
    # configuration has work of its own.
    write_inputs(inputs, 8, 1)

    readings = 9 * PER_FILE
    changed = [
        *settings,
        "firesteel.runtimes.spark.checkpointing.interval = 3s",
        'firesteel.runtimes.spark.config { "spark.sql.shuffle.partitions" = 3 }',
    ]
    third = LocalRunner(blueprint, work, settings=changed)
    third.start()
    try:
        wait(third, lambda: counted(output) >= readings, "every reading to be counted")
    finally:
        third.stop()
    _assert_exact(output_rows(output), readings)


def counted(output: Path) -> int:
    """The readings the egress output counts: the sum of each sensor's latest count."""
    rows = output_rows(output)
    return sum(
        max(int(str(r["count"])) for r in rows if r["sensor"] == s)
        for s in {r["sensor"] for r in rows}
    )


def _assert_exact(rows: list[dict[str, object]], readings: int) -> None:
    """Each sensor counted ``readings / SENSORS`` readings with their mean, no row twice."""
    final = {
        s: max(int(str(r["count"])) for r in rows if r["sensor"] == s)
        for s in {r["sensor"] for r in rows}
    }
    assert final == {f"s{i}": readings // SENSORS for i in range(SENSORS)}
    repeated = [key for key, n in Counter((r["sensor"], r["count"]) for r in rows).items() if n > 1]
    assert repeated == []
    means = {r["sensor"]: r["mean"] for r in rows if r["count"] == readings // SENSORS}
    assert means == {
        f"s{i}": sum(range(i, readings, SENSORS)) / (readings // SENSORS) for i in range(SENSORS)
    }
