"""The example pipeline on local and on Kafka topics, killed inside its commits and
restarted: every reading counted once.

Runs of ``LocalRunner`` in its default mode, every streamlet a set of queries of one Spark
application (``firesteel.runner.jvm = shared``), armed through the process's environment
(:func:`firesteel.testing.fault_setting`: each spec with its own kill mode). In the first
run the stateful streamlet's outlet query loses a task at a protocol point of its sink
(once a task wrote its records, before its vote: a fault point aimed at that query's tasks
kills the Python worker running it, as a crash of its executor would), and the application
restarts that streamlet's queries alone, the driver and the other streamlets running on;
the restarted query's re-run of the batch then dies inside its driver-side commit with the
whole process (driver JVM and Python workers), SIGKILLed: on local topics at
``driver.mid_commit``, between the file topic's manifest and the moves publishing its
files; on Kafka at ``kafka.after_commit_transaction``, once a write-ahead segment's
transaction (records and marker) committed, before the batch is recorded (a batch of three
sensors sends one segment, so ``driver.mid_commit``, between two segments, is not
reached). The runner restarts it under supervision, now armed with ``driver.after_commit``
gathered over the ingress's and the stateful streamlet's outlet queries: the first of them
to commit waits inside its commit for the other, then the whole process is SIGKILLed with
both inside. Each driver-side point finds its query by the id the host recorded under the
query's name. A last run, given more input while the pipeline was down, runs with another
trigger interval and Spark shuffle-partition count until every reading is counted. The
egress output is read with pyarrow's dataset reader, not firesteel's: each sensor's final
count is its number of readings, with its mean, and no (sensor, count) row appears twice.

On Kafka (the suite's broker) the test runs a copy of the example whose blueprint names
topics of its own, so no earlier run's records are read; the readings cross two Kafka
hops.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from sensors_run import (
    EXAMPLE,
    PER_FILE,
    SENSORS,
    TIMEOUT_S,
    kafka_example,
    output_rows,
    quick_start,
    wait,
    write_inputs,
)

from firesteel.pipelines.runner import SHARED, LocalRunner
from firesteel.testing import at_point, fault_setting
from firesteel.testing.faults import FAULT_ENV, MARKER_DIR_ENV, PGID_ENV, SESSION, gathered

pytestmark = pytest.mark.crash

INGRESS = "sensors.readings.out"
STATEFUL = "sensors.metrics.out"
"""The queries of the ingress's and of the stateful streamlet's outlets, as the host names them."""


def _restarts(runner: LocalRunner, streamlet: str) -> int:
    """How often the pipeline's process restarted ``streamlet``'s queries, by its log."""
    log = runner.log_path(streamlet)
    text = log.read_text() if log.exists() else ""
    return text.count(f"streamlet {streamlet}: query ")


def _daemon_restarted(runner: LocalRunner) -> bool:
    """Whether Spark restarted its Python worker daemon in the pipeline's process.

    The failed batch's cancellation interrupts the query's other tasks; one interrupted
    while it waits for a newly forked worker makes Spark report a connect-back timeout
    and restart the daemon, and every worker it forked dies with it: the other
    streamlets' tasks then in flight fail, and their queries restart too
    (:data:`firesteel.pipelines.host.IDLE_WORKERS`). Seen once in five suite runs."""
    return "Lost connection to Python daemon" in runner.log_path(SHARED).read_text()


def _death(runner: LocalRunner) -> int:
    """Wait, without restarting it, for the pipeline's process to die; its exit code."""
    deadline = time.monotonic() + TIMEOUT_S
    while (code := runner.processes[SHARED].poll()) is None:
        assert time.monotonic() < deadline, f"no kill came: {runner.log_path(SHARED)}"
        time.sleep(0.5)
    return code


def _fired(faults: Path) -> list[str]:
    """The specs that fired (their markers; dot-folders hold query names and arrivals)."""
    return sorted(p.name for p in faults.iterdir() if not p.name.startswith("."))


@pytest.mark.parametrize("topics", ["local", "kafka"])
def test_every_reading_counted_once_across_kills_inside_commits_and_a_changed_configuration(
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
        blueprint = kafka_example(tmp_path / "example", tmp_path.name)
        settings.append(f'firesteel.kafka.bootstrap.servers = "{bootstrap}"')
    else:
        blueprint = EXAMPLE / "blueprint.conf"

    write_inputs(inputs, 0, 3)
    faults = tmp_path / "faults"
    task_kill = at_point("sink.after_write", mode="process", query=STATEFUL)
    # Inside the commit, between two durable writes: on local topics the file topic's
    # manifest is written, its files not yet moved into place; on Kafka a write-ahead
    # segment's transaction committed (records and marker), the batch not yet recorded.
    inside = "driver.mid_commit" if topics == "local" else "kafka.after_commit_transaction"
    mid_commit = at_point(inside, query=STATEFUL)
    # A whole-job kill takes the session the runner started the pipeline's process in.
    job = {MARKER_DIR_ENV: str(faults), PGID_ENV: SESSION}
    armed = {FAULT_ENV: fault_setting(task_kill, mid_commit), **job}
    supervised = LocalRunner(blueprint, work, settings=settings, environment={"metrics": armed})
    supervised.start()
    try:
        # The task kill restarts the stateful streamlet's queries inside the running process;
        # their re-run of the batch dies inside its commit with the whole process.
        assert _death(supervised) == -signal.SIGKILL
        assert _fired(faults) == sorted([*task_kill.specs, *mid_commit.specs])
        assert _restarts(supervised, "metrics") == 1, "its queries restart, not the JVM"
        others = (_restarts(supervised, "readings"), _restarts(supervised, "store"))
        assert others == (0, 0) or _daemon_restarted(supervised), others

        # Its restart by the runner's supervision meets two queries' commits at once.
        after_commit = at_point("driver.after_commit", query=[INGRESS, STATEFUL])
        spec = after_commit.specs[0]
        supervised.environment["metrics"] = {FAULT_ENV: fault_setting(after_commit), **job}
        write_inputs(inputs, 3, 3)
        killed = supervised.processes[SHARED].pid
        wait(supervised, lambda: supervised.processes[SHARED].pid != killed, "its restart")
        assert _death(supervised) == -signal.SIGKILL
        assert supervised.restarts[SHARED].total == 1
        assert spec in _fired(faults)
        assert gathered(faults, spec) == sorted([INGRESS, STATEFUL])
    finally:
        supervised.stop()

    # More input arrives while the pipeline is down: the run with the changed
    # configuration has work of its own.
    write_inputs(inputs, 6, 3)
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
