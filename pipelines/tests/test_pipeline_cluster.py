"""``firesteel run --master``: the example pipeline over Kafka, each streamlet its own Spark
application on a standalone cluster, every reading counted once (read with pyarrow)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sensors_run import (
    PER_FILE,
    SENSORS,
    kafka_example,
    output_rows,
    quick_start,
    wait,
    write_inputs,
)

from firesteel.pipelines.runner import LocalRunner
from firesteel.testing.cluster import StandaloneCluster
from firesteel.testing.jobs import QUICK_START_JVM

pytestmark = pytest.mark.cluster


def test_each_streamlet_runs_as_its_own_application_on_a_standalone_cluster(
    tmp_path: Path, bootstrap: str
) -> None:
    inputs, output, work = tmp_path / "in", tmp_path / "out", tmp_path / "work"
    write_inputs(inputs, 0, 3)
    blueprint = kafka_example(tmp_path / "example", tmp_path.name)
    settings = [
        f"firesteel.streamlets.readings.config-parameters.input-dir = {inputs}",
        f"firesteel.streamlets.store.config-parameters.output-dir = {output}",
        f'firesteel.kafka.bootstrap.servers = "{bootstrap}"',
        "firesteel.runtimes.spark.checkpointing.interval = 1s",
        'firesteel.runtimes.spark.config { "spark.driver.host" = "127.0.0.1", '
        '"spark.driver.bindAddress" = "127.0.0.1", "spark.cores.max" = 1, '
        '"spark.executor.cores" = 1, "spark.executor.memory" = "512m", '
        f'"spark.executor.extraJavaOptions" = "{QUICK_START_JVM}" }}',
        quick_start(),
    ]
    # One core per streamlet: a streaming application keeps its executor for as long as it runs.
    with StandaloneCluster(tmp_path / "cluster", workers=1, cores=3, memory="2g") as cluster:
        runner = LocalRunner(blueprint, work, settings=settings, master=cluster.master_url)
        runner.start()
        try:
            readings = 3 * PER_FILE

            def counted() -> bool:
                rows = output_rows(output)
                return sum(1 for r in rows if r["count"] == readings // SENSORS) == SENSORS

            wait(runner, counted, "every reading to be counted")
            applications = len(list((tmp_path / "cluster" / "work").glob("app-*")))
        finally:
            runner.stop()
    assert applications == 3
    rows = output_rows(output)
    final = {
        s: max(r["count"] for r in rows if r["sensor"] == s) for s in {r["sensor"] for r in rows}
    }
    assert final == {f"s{i}": readings // SENSORS for i in range(SENSORS)}
