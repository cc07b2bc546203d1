"""A query's metrics: per-batch records of committed work beside the checkpoint, read by
``firesteel status`` and served to Prometheus, counting a batch once however often it ran
(the crash test of the file path checks the same after SIGKILLs: ``crash_paths.FilesJob``)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
from files_helpers import rows, run_available_now, write_input

from firesteel.core.context import TaskScope
from firesteel.core.metrics import read_history, task_metrics
from firesteel.core.metrics.history import RETAINED
from firesteel.core.metrics.prometheus import serve_prometheus
from firesteel.core.metrics.task import measured_write
from firesteel.core.sink import PlainSink, Vote
from firesteel.core.spark.writer import commit_batch
from firesteel.testing.ports import free_port


class CountingSink(PlainSink):
    """Counts what it is handed, and a connector counter of its own."""

    name = "counting"

    def __init__(self) -> None:
        self.sink_id = "counting"

    def write(self, scope: TaskScope, batches: Iterator[pa.RecordBatch]) -> int:
        written = 0
        for batch in batches:
            written += batch.num_rows
            task_metrics().count("requests_sent", 2)
        return written


def _votes(sink: CountingSink, batch: int, partitions: list[int]) -> list[Vote]:
    return [
        measured_write(
            sink,
            TaskScope("query", batch, partition, 0),
            iter([pa.record_batch({"seq": pa.array(range(n), pa.int64())})]),
        )
        for partition, n in enumerate(partitions)
    ]


def test_a_batch_committed_again_replaces_its_record_and_totals_stay(tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "ck")
    sink = CountingSink()
    commit_batch(sink, checkpoint, 0, _votes(sink, 0, [3, 4]))
    commit_batch(sink, checkpoint, 1, _votes(sink, 1, [5]))
    # Spark commits batch 1 again after a crash before commits/1, here with another
    # partitioning of the same rows.
    commit_batch(sink, checkpoint, 1, _votes(sink, 1, [2, 3]))

    (records,) = read_history(checkpoint).values()
    assert [(r.batch, r.tasks, r.input_rows) for r in records] == [(0, 2, 7), (1, 2, 5)]
    latest = records[-1]
    assert latest.totals["input_rows"] == 12 and latest.totals["batches"] == 2
    assert latest.counters == {"requests_sent": 4} and latest.totals["requests_sent"] == 8
    assert latest.input_bytes == 5 * 8 and latest.totals["input_bytes"] == 12 * 8


def test_only_the_last_batches_are_kept(tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "ck")
    sink = CountingSink()
    for batch in range(RETAINED + 5):
        commit_batch(sink, checkpoint, batch, _votes(sink, batch, [1]))
    (records,) = read_history(checkpoint).values()
    assert [r.batch for r in records] == list(range(5, RETAINED + 5))
    assert records[-1].totals["input_rows"] == RETAINED + 5
    assert len(list((tmp_path / "ck" / "firesteel" / "metrics" / "counting").iterdir())) == RETAINED


def test_a_files_query_is_seen_by_status_and_prometheus(spark, tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    for i in range(4):
        write_input(tmp_path / "in", f"f{i}.parquet", rows(i * 250, 250), "parquet")
    reader = (
        spark.readStream.format("firesteel.files")
        .option("max.files.per.batch", "2")
        .load(str(tmp_path / "in"))
    )
    checkpoint = str(tmp_path / "ck")
    options = {"path": str(tmp_path / "out"), "checkpointLocation": checkpoint}
    assert run_available_now(reader, options).exception() is None
    written = ds.dataset(str(tmp_path / "out")).count_rows()

    shown = subprocess.run(
        [sys.executable, "-m", "firesteel.cli.main", "status", checkpoint, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    status = json.loads(shown.stdout)
    assert status["last_committed_batch"] == status["last_logged_batch"] == 1
    (sink,) = status["sinks"].values()
    assert sink["totals"]["input_rows"] == written == 1000
    assert [b["input_rows"] for b in sink["batches"]] == [500, 500]
    assert all(b["input_bytes"] > 0 and b["write_seconds"] > 0 for b in sink["batches"])
    # From Spark planning the batch (offsets/N) to the commit: the write and commit inside it.
    assert all(
        b["batch_seconds"] >= b["write_seconds"] + b["commit_seconds"] for b in sink["batches"]
    )
    (guarantee,) = status["guarantees"].values()
    assert guarantee["achieved"] == "exactly-once"
    text = subprocess.run(
        [sys.executable, "-m", "firesteel.cli.main", "status", checkpoint],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "last committed batch: 1" in text and "input_rows 1,000" in text

    port = free_port()
    server = serve_prometheus(port, {"files": checkpoint})
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as page:
            families = {f.name: f for f in text_string_to_metric_families(page.read().decode())}
    finally:
        server.shutdown()
    (rows_sample,) = families["firesteel_sink_input_rows"].samples
    assert rows_sample.labels["query"] == "files" and rows_sample.value == written
    (batches_sample,) = families["firesteel_sink_batches"].samples
    assert batches_sample.value == 2
    (last,) = families["firesteel_sink_last_batch"].samples
    assert last.value == 1


def test_status_of_a_folder_that_is_no_checkpoint_exits_2(tmp_path: Path) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "firesteel.cli.main", "status", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shown.returncode == 2
    assert f"{tmp_path} is not a Spark checkpoint" in shown.stderr


def test_the_dashboard_shows_what_status_says_in_a_real_browser(spark, tmp_path: Path) -> None:
    """``firesteel ui`` opened in headless Chromium (Debian's, driven by Playwright): the
    charts are drawn (their bars' colour is in the screenshot) and the totals it shows are
    those of ``firesteel status --json``."""
    import shutil

    from matplotlib.image import imread
    from playwright.sync_api import sync_playwright

    from firesteel.cli.status import query_status
    from firesteel.cli.ui import serve

    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is missing: make install installs it (apt-get)"
    for i in range(3):
        write_input(tmp_path / "in", f"f{i}.parquet", rows(i * 100, 100 + i), "parquet")
    reader = (
        spark.readStream.format("firesteel.files")
        .option("max.files.per.batch", "1")
        .load(str(tmp_path / "in"))
    )
    checkpoint = str(tmp_path / "ck")
    options = {"path": str(tmp_path / "out"), "checkpointLocation": checkpoint}
    assert run_available_now(reader, options).exception() is None
    (sink,) = query_status(checkpoint)["sinks"].values()

    server = serve([checkpoint])
    shot = tmp_path / "ui.png"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
            page.wait_for_selector("td[data-total=input_rows]")
            shown = page.inner_text("td[data-total=input_rows]")
            bars = page.locator("figure[data-chart=rows] rect").count()
            committed = page.inner_text("[data-field=last-committed]")
            page.screenshot(path=str(shot), full_page=True)
            browser.close()
    finally:
        server.shutdown()
    assert shown == f"{sink['totals']['input_rows']:,.0f}" == "303"
    assert bars == len(sink["batches"]) == 3
    assert committed.startswith("last committed batch 2 ")
    pixels = imread(str(shot))[..., :3]
    orange = (abs(pixels[..., 0] - 0xD9 / 255) < 0.02) & (abs(pixels[..., 1] - 0x54 / 255) < 0.02)
    assert orange.sum() > 500, "the rows chart's bars are not on the screenshot"
