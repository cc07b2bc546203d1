"""The "orders" pipeline of issue 50, rebuilt from its description, run as one Spark
application's queries (``firesteel.runner.jvm = shared``'s host) over local topics and over
Kafka, its JSON port unchanged; its outputs read with pyarrow, its Kafka topics with a plain
``read_committed`` consumer.

Five streamlets: a JSON-lines ingress whose JSON port carries a timestamp, a
validation with two Avro outlets and double / regex-string / duration
parameters, a keyed-state aggregate, two Parquet egresses
(``examples/pipelines/orders``). The host runs in this test's process on the
suite's session (each streamlet in a session of its own), so it costs no
JVM start.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from orders_run import ORDERS_EXAMPLE
from pyspark import cloudpickle
from pyspark.sql import SparkSession

from firesteel.cli.status import main as status_command
from firesteel.pipelines.host import Host
from firesteel.pipelines.kafka import create_topics
from firesteel.pipelines.progress import ProgressPrinter, StreamletProgress, pipeline_progress
from firesteel.pipelines.runner import load
from firesteel.testing.pipelines.orders import (
    expected_totals,
    final_totals,
    reason,
    repeated,
    rows,
    write_orders,
)

TIMEOUT_S = 240.0
TOPICS = ("orders", "valid-orders", "rejected-orders", "customer-totals")


def _blueprint(tmp_path: Path, suffix: str | None) -> Path:
    """The example's blueprint, its Kafka topics named for this run when ``suffix`` is set."""
    if suffix is None:
        return ORDERS_EXAMPLE / "blueprint.conf"
    folder = tmp_path / "example"
    folder.mkdir()
    (folder / "orders.py").write_text((ORDERS_EXAMPLE / "orders.py").read_text())
    text = (ORDERS_EXAMPLE / "blueprint.conf").read_text()
    text += "".join(f'blueprint.topics.{t}.topic.name = "{t}-{suffix}"\n' for t in TOPICS)
    (folder / "blueprint.conf").write_text(text)
    return folder / "blueprint.conf"


def _run_until(host: Host, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not done():
        assert host.step(time.monotonic()) is None, "a streamlet stopped the pipeline"
        assert time.monotonic() < deadline, "timed out waiting for the orders"
        time.sleep(0.5)


def check_progress(work: Path) -> None:
    """Each streamlet's progress against the topics counted with pyarrow: a producer's rows
    out are its topic's rows, and a consumer's rows in plus its lag are the same rows."""
    progress = {shown.streamlet: shown for shown in pipeline_progress(work)}
    topic = {name: len(rows(work / "topics" / name)) for name in TOPICS}
    assert progress["orders"].rows_out == topic["orders"] > 0
    assert progress["validate"].rows_out == topic["valid-orders"] + topic["rejected-orders"]
    assert progress["totals"].rows_out == topic["customer-totals"] > 0
    for streamlet, inlet in [
        ("validate", "orders"),
        ("totals", "valid-orders"),
        ("store-rejected", "rejected-orders"),
        ("store-totals", "customer-totals"),
    ]:
        shown = progress[streamlet]
        assert shown.batch is not None and shown.rows_in is not None
        assert shown.rows_in + shown.lag[inlet] == topic[inlet], streamlet
    # firesteel status on the work folder: the same per streamlet, with its queries.
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert status_command([str(work)]) == 0
    lines = printed.getvalue().splitlines()
    assert lines[0] == f"pipeline at {work}: {len(progress)} streamlets"
    for name, shown in progress.items():
        (line,) = [line for line in lines if line.startswith(f"  {name}: ")]
        assert f"rows out {shown.rows_out:,}" in line
        assert f"    query {work / 'checkpoints' / name}/" in "\n".join(lines)
    check_page(work, progress)


def check_page(work: Path, progress: dict[str, StreamletProgress]) -> None:
    """``firesteel ui`` on the work folder in headless Chromium: the topology has a box per
    streamlet and an arrow per topic and consumer, labelled with the lag the progress says,
    then the streamlets' table and each query's section."""
    from firesteel.testing.browser import ui_page

    with ui_page([str(work)], "svg[data-chart=topology] g[data-streamlet]") as page:
        boxes = page.eval_on_selector_all(
            "svg[data-chart=topology] g[data-streamlet]",
            "gs => gs.map(g => g.dataset.streamlet)",
        )
        arrows = page.eval_on_selector_all(
            "svg[data-chart=topology] g[data-topic]",
            "gs => gs.map(g => [g.dataset.topic, g.dataset.consumer,"
            " g.querySelector('text').dataset.lag])",
        )
        rows = page.locator("table[data-streamlets] tbody tr").count()
        queries = page.locator("section[data-checkpoint]").count()
    assert sorted(boxes) == sorted(progress)
    inlets = [
        ("orders", "validate"),
        ("valid-orders", "totals"),
        ("rejected-orders", "store-rejected"),
        ("customer-totals", "store-totals"),
    ]
    assert sorted((t, c) for t, c, _ in arrows) == sorted(inlets)
    assert all(lag == str(progress[c].lag[t]) for t, c, lag in arrows), arrows
    assert rows == len(progress)
    assert queries == sum(shown.queries for shown in progress.values())


@pytest.mark.parametrize("topics", ["local", "kafka"])
def test_the_orders_pipeline_counts_every_order_once(
    spark: Any, tmp_path: Path, topics: str, request: pytest.FixtureRequest
) -> None:
    inputs, totals_dir, rejected_dir = tmp_path / "in", tmp_path / "totals", tmp_path / "rejected"
    settings = [
        f"firesteel.streamlets.orders.config-parameters.input-dir = {inputs}",
        f"firesteel.streamlets.store-totals.config-parameters.output-dir = {totals_dir}",
        f"firesteel.streamlets.store-rejected.config-parameters.output-dir = {rejected_dir}",
        "firesteel.streamlets.validate.config-parameters.max-amount = 500.0",
        'firesteel.streamlets.validate.config-parameters.currency = "EUR"',
        "firesteel.streamlets.validate.config-parameters.max-age = 1 day",
        "firesteel.runtimes.spark.checkpointing.interval = 500ms",
        "firesteel.streamlets.totals.parallelism = 2",
    ]
    bootstrap = request.getfixturevalue("bootstrap") if topics == "kafka" else None
    if bootstrap is not None:
        settings.append(f'firesteel.kafka.bootstrap.servers = "{bootstrap}"')
    blueprint = _blueprint(tmp_path, tmp_path.name if bootstrap else None)
    verified, config = load(blueprint, [], settings)
    # Spark's Python workers cannot import the example module by name: ship it by value.
    cloudpickle.register_pickle_by_value(importlib.import_module("orders"))
    if bootstrap is not None:
        create_topics(verified, config)
    orders = write_orders(inputs, 0, 40)
    wanted = expected_totals(orders)
    rejections = Counter(r for r in map(reason, orders) if r is not None)
    assert set(rejections) == {"currency", "amount", "stale"}

    work = tmp_path / "work"
    host = Host(spark, verified, config, work)
    printed = io.StringIO()
    printer = ProgressPrinter(work, 1.0, printed).start()
    try:
        for name in verified.streamlets:
            assert host.launch(name, time.monotonic())
        _run_until(
            host,
            lambda: (
                final_totals(rows(totals_dir)) == wanted
                and len(rows(rejected_dir)) >= sum(rejections.values())
            ),
        )
    finally:
        printer.stop()
        host.stop()
    # What run-local prints while it runs: every streamlet's progress, a line at a time.
    lines = [line for line in printed.getvalue().splitlines() if line.startswith("progress: ")]
    assert lines and all(f"{name}: " in lines[-1] for name in verified.streamlets)
    if bootstrap is None:
        check_progress(work)
    # Spark finds a Python data source by name in the thread's active session: a
    # streamlet's session left active hid the suite's later registrations from its tests.
    sessions = SparkSession._get_j_spark_session_class(spark.sparkContext._jvm)
    assert sessions.getActiveSession().get().equals(spark._jsparkSession)
    assert SparkSession.getActiveSession() is spark
    totals, rejected = rows(totals_dir), rows(rejected_dir)
    assert Counter(str(r["reason"]) for r in rejected) == rejections
    assert repeated(totals, rejected) == []
    if bootstrap is None:
        return
    from firesteel.testing.kafka import read_committed

    counts = {t: len(read_committed(bootstrap, f"{t}-{tmp_path.name}")) for t in TOPICS}
    valid = sum(n for n, _ in wanted.values())
    assert counts["orders"] == len(orders)
    assert counts["valid-orders"] == valid
    assert counts["rejected-orders"] == sum(rejections.values())
    first = json.loads(read_committed(bootstrap, f"orders-{tmp_path.name}")[0].value or b"")
    assert set(first) == {"order_id", "customer", "amount", "currency", "placed_at"}
