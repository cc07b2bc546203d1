"""The example pipeline on local and on Kafka topics, killed and restarted: every reading
counted once.

Two runs of ``LocalRunner`` in its default mode, every streamlet a set of
queries of one Spark application (``firesteel.runner.jvm = shared``): in the
first, supervised, the stateful streamlet's outlet query dies at a protocol
point of its sink (a fault point aimed at that query's tasks, killing the
Python worker that runs it, as a crash of its executor would), the
application restarts that streamlet's queries alone, its driver and the other
streamlets running on, and the readings so far are counted exactly; then the
whole process is SIGKILLed at a random moment within 3 s of more input,
restarted by the runner and counted again, then SIGKILLed again once the
egress has more output; the second run, given one more input file while the
pipeline was down,
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
    output_rows,
    quick_start,
    wait,
    write_inputs,
)

from firesteel.pipelines.runner import SHARED, LocalRunner

pytestmark = pytest.mark.crash

SEED_ENV = "FIRESTEEL_TEST_SEED"
"""Set to the seed a failed run printed to repeat its random kill moment."""


def _kill(runner: LocalRunner) -> None:
    os.killpg(runner.processes[SHARED].pid, signal.SIGKILL)
    runner.processes[SHARED].wait()


def _restarts(runner: LocalRunner, streamlet: str) -> int:
    """How often the pipeline's process restarted ``streamlet``'s queries, by its log."""
    log = runner.log_path(streamlet)
    text = log.read_text() if log.exists() else ""
    return text.count(f"streamlet {streamlet}: query ")


@pytest.mark.parametrize("topics", ["local", "kafka"])
def test_every_reading_counted_once_across_kills_and_a_changed_configuration(
    tmp_path: Path, topics: str, request: pytest.FixtureRequest
) -> None:
    seed = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(1 << 32))
    print(f"random kill moment: {SEED_ENV}={seed}")  # shown with a failure's output
    kill_moment = random.Random(seed)
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
    else:
        blueprint = EXAMPLE / "blueprint.conf"

    write_inputs(inputs, 0, 3)
    # Under supervision (on by default) a streamlet whose query failed has its queries
    # restarted. The stateful streamlet's outlet query fails first at a protocol point of its
    # sink: once a task wrote its records (its write-ahead segment on Kafka, its files on
    # local topics), before it voted. The fault kills the Python worker of that query's task
    # only and leaves its marker, so the restarted queries run on; the readings so far are
    # then counted exactly.
    point = "sink.after_write"
    faults = tmp_path / "faults"
    armed = {
        "FIRESTEEL_FAULT": f"{point}#sensors.metrics.out",
        "FIRESTEEL_FAULT_KILL": "process",
        "FIRESTEEL_FAULT_DIR": str(faults),
    }
    supervised = LocalRunner(blueprint, work, settings=settings, environment={"metrics": armed})
    supervised.start()
    try:
        driver = supervised.processes[SHARED].pid
        wait(
            supervised,
            lambda: _restarts(supervised, "metrics") == 1 and counted(output) >= 3 * PER_FILE,
            "the metrics' queries restarted after its fault point",
        )
        assert any(faults.iterdir())
        assert supervised.processes[SHARED].pid == driver, "its queries restart, not the JVM"
        assert supervised.restarts[SHARED].total == 0
        assert (_restarts(supervised, "readings"), _restarts(supervised, "store")) == (0, 0)
        _assert_exact(output_rows(output), 3 * PER_FILE)

        # Then the whole process is SIGKILLed at a random moment within 3 s of more input,
        # restarted by the runner, and the readings so far counted exactly, before it is
        # SIGKILLed again with more input on its way.
        write_inputs(inputs, 3, 3)
        time.sleep(kill_moment.uniform(0, 3))
        _kill(supervised)
        wait(
            supervised,
            lambda: supervised.processes[SHARED].pid != driver and counted(output) >= 6 * PER_FILE,
            "the restarted pipeline",
        )
        assert supervised.restarts[SHARED].total == 1
        _assert_exact(output_rows(output), 6 * PER_FILE)

        write_inputs(inputs, 6, 2)
        seen = len(output_rows(output))
        wait(supervised, lambda: len(output_rows(output)) > seen, "the egress to write")
        _kill(supervised)
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
