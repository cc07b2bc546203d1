"""A query's metrics: per-batch records of committed work beside the checkpoint, read by
``firesteel status`` and served to Prometheus, counting a batch once however often it ran
(the crash test of the file path checks the same after SIGKILLs: ``crash_paths.FilesJob``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from files_helpers import rows, run_available_now, write_input

from firesteel.core.context import TaskScope
from firesteel.core.metrics import read_history, task_metrics
from firesteel.core.metrics.history import RETAINED
from firesteel.core.metrics.prometheus import serve_prometheus
from firesteel.core.metrics.task import (
    HANDOVER_DIR,
    measured_write,
    remove_handovers,
    sweep_handovers,
    timed_iteration,
)
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


class _Clock:
    """Time that moves only when a step of the test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_task_s_phases_are_each_step_s_own_time() -> None:
    """The input takes 1 s to produce each batch, the sink 10 s to write it: the write phase
    is the sink's 30 s, the process phase the 3 s it waited for its input (no source's
    reader handed a read over outside Spark), the input's own time excluding the sink's."""
    clock = _Clock()

    def produced() -> Iterator[pa.RecordBatch]:
        for n in (1, 2, 3):
            clock.now += 1
            yield pa.record_batch({"seq": pa.array(range(n), pa.int64())})

    class SlowSink(CountingSink):
        def write(self, scope: TaskScope, batches: Iterator[pa.RecordBatch]) -> int:
            written = 0
            for batch in batches:
                clock.now += 10
                written += batch.num_rows
            return written

    vote = measured_write(SlowSink(), TaskScope("query", 0, 0, 0), produced(), clock)
    assert vote.metrics["write_seconds"] == 30 and vote.metrics["process_seconds"] == 3
    assert vote.metrics["input_rows"] == 6 and "read_seconds" not in vote.metrics

    totals: dict[str, float] = {}
    clock.now = 0.0
    for _ in timed_iteration(produced(), totals, clock):
        clock.now += 10
    assert totals == {"rows": 6, "bytes": 6 * 8, "seconds": 3}


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


def test_hand_over_folders_of_stopped_queries_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder no task touched for a day goes at a worker's first hand-over; a stopped
    query's folder goes when the driver's listener hears it stopped (``test_savepoint_jobs``
    runs that listener)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    root = tmp_path / HANDOVER_DIR
    for query in ("idle", "fresh", "stopped"):
        (root / query / "0").mkdir(parents=True)
        (root / query / "0" / "ranks.json").write_text("{}")
    now = time.time()
    two_days_ago = now - 2 * 24 * 3600
    for path in (root / "idle", root / "idle" / "0", root / "idle" / "0" / "ranks.json"):
        os.utime(path, (two_days_ago, two_days_ago))
    os.utime(root / "fresh", (two_days_ago, two_days_ago))  # a file in it was written now
    assert sweep_handovers(now=now) == ["idle"]
    assert sorted(p.name for p in root.iterdir()) == ["fresh", "stopped"]
    remove_handovers("stopped")
    assert [p.name for p in root.iterdir()] == ["fresh"]


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
    # The source's read ran in the sink's tasks: its rows are the rows written, its time a
    # phase of the batch beside the process and the write.
    assert [b["counters"]["read_rows"] for b in sink["batches"]] == [500, 500]
    assert sink["totals"]["read_rows"] == written
    assert all(b["read_seconds"] > 0 and b["process_seconds"] >= 0 for b in sink["batches"])
    # From Spark planning the batch (offsets/N) to the commit: the phases inside it (each the
    # slowest task's, and a task's phases are parts of its time).
    assert all(
        b["batch_seconds"] >= b["write_seconds"] + b["commit_seconds"]
        and b["batch_seconds"] >= b["read_seconds"] + b["commit_seconds"]
        for b in sink["batches"]
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
    from matplotlib.image import imread

    from firesteel.cli.status import query_status
    from firesteel.testing.browser import ui_page

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

    shot = tmp_path / "ui.png"
    with ui_page([checkpoint], "td[data-total=input_rows]") as page:
        shown = page.inner_text("td[data-total=input_rows]")
        bars = page.locator("figure[data-chart=rows] rect").count()
        committed = page.inner_text("[data-field=last-committed]")
        history = page.locator("table[data-history] tbody tr").count()
        phases = page.locator("figure[data-chart=phases] rect").count()
        cell = "table[data-history] tr[data-batch='0'] [data-column='{}']"
        first = page.inner_text(cell.format("write s"))
        first_read = page.inner_text(cell.format("read s"))
        page.screenshot(path=str(shot), full_page=True)
    assert shown == f"{sink['totals']['input_rows']:,.0f}" == "303"
    assert bars == len(sink["batches"]) == 3
    assert committed.startswith("last committed batch 2 ")
    # The checkpoint history, a row per batch; the phases stacked per batch: the read,
    # the process, the write, the commit's publish and the rest of the commit.
    assert history == 3 and phases == 3 * 5
    assert first == f"{sink['batches'][0]['write_seconds']:.3f}"
    assert first_read == f"{sink['batches'][0]['read_seconds']:.3f}"
    pixels = imread(str(shot))[..., :3]
    orange = (abs(pixels[..., 0] - 0xD9 / 255) < 0.02) & (abs(pixels[..., 1] - 0x54 / 255) < 0.02)
    assert orange.sum() > 500, "the rows chart's bars are not on the screenshot"


def test_a_keyed_query_records_its_phases_and_its_state(spark, tmp_path: Path) -> None:
    """A keyed count on the filesystem backend into the file sink: each batch's record holds
    the commit's parts and the operator's snapshot, equal to what the test counts itself
    (keys read back from the state with pyarrow, snapshot bytes from the store's listing,
    rows written per batch); Spark's progress of each batch comes merged with it
    (``last_progress``, the listener); ``status`` shows them as a phases table, Prometheus
    as a histogram and gauges."""
    from prometheus_client.parser import text_string_to_metric_families

    from firesteel.backends import FilesystemBackend
    from firesteel.backends.inspect import read_state
    from firesteel.core.metrics.progress import last_progress, watch_progress
    from firesteel.state import stateful
    from firesteel.testing.processors import RankPerKey

    for index, keys in enumerate((range(30), range(20, 50))):
        seqs = [index * 100 + k for k in keys]
        table = pa.table({"seq": seqs, "key": [f"k{k}" for k in keys]})
        write_input(tmp_path / "in", f"f{index}.parquet", table, "parquet")
    state = f"file://{tmp_path}/state"
    reader = (
        spark.readStream.format("firesteel.files")
        .option("max.files.per.batch", "1")
        .load(str(tmp_path / "in"))
    )
    ranked = stateful(
        reader,
        key="key",
        processor=RankPerKey(),
        output_schema="seq long, key string, rank long",
        backend=FilesystemBackend(state),
        name="ranks",
        parallelism=2,
        max_parallelism=8,
    )
    checkpoint = str(tmp_path / "ck")
    options = {"path": str(tmp_path / "out"), "checkpointLocation": checkpoint}
    seen: list[dict] = []
    listener = watch_progress(spark, seen.append)
    try:
        query = run_available_now(ranked, options)
        assert query.exception() is None
        deadline = time.monotonic() + 60
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)  # Spark's listener bus delivers progress asynchronously
    finally:
        spark.streams.removeListener(listener)

    assert ds.dataset(str(tmp_path / "out")).count_rows() == 60
    last = last_progress(query)
    assert last is not None and last["batchId"] == 1
    (merged,) = last["firesteel"]["sinks"].values()
    assert merged["batch"] == 1 and merged["input_rows"] == last["numInputRows"] == 30
    assert merged["totals"]["input_rows"] == 60
    assert [p["batchId"] for p in seen] == [0, 1]
    per_batch = [next(iter(p["firesteel"]["sinks"].values())) for p in seen]
    assert [r["input_rows"] for r in per_batch] == [p["numInputRows"] for p in seen] == [30, 30]
    assert [r["operators"]["ranks"]["state_entries"] for r in per_batch] == [30, 50]

    (records,) = read_history(checkpoint).values()
    assert [r.batch for r in records] == [0, 1]
    for record in records:
        figures = record.operators["ranks"]
        stored = read_state(state, operator="ranks", batch=record.batch)
        keys = stored.filter(pa.compute.equal(stored["state"], "count"))["key"]
        assert figures["state_entries"] == len(keys) == (30, 50)[record.batch]
        version = tmp_path / "state" / "ranks" / f"v{record.batch:012d}"
        assert figures["snapshot_bytes"] == sum(p.stat().st_size for p in version.iterdir())
        assert figures["snapshot_seconds"] >= figures["snapshot_blocked_seconds"] > 0
        # The source was read in the tasks before the shuffle, not in the sink's: no read
        # phase; the sink's tasks waited for the shuffle and the operator (the process).
        assert record.read_seconds is None and record.process_seconds > 0
        assert 0 < record.commit_phases["publish"] <= record.commit_seconds
    latest = records[-1]
    assert latest.histograms["snapshot"]["count"] == latest.histograms["write"]["count"] == 2
    # The first snapshot is a full one: the state's bytes are known then.
    assert (
        records[0].operators["ranks"]["state_bytes"]
        == records[0].operators["ranks"]["snapshot_bytes"]
    )

    text = subprocess.run(
        [sys.executable, "-m", "firesteel.cli.main", "status", checkpoint],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "snapshot s (ranks)" in text and "publish s" in text
    assert "operator ranks batch 1: snapshot" in text and "50 entries" in text

    port = free_port()
    server = serve_prometheus(port, {"ranks": checkpoint})
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as page:
            families = {f.name: f for f in text_string_to_metric_families(page.read().decode())}
    finally:
        server.shutdown()
    (entries,) = families["firesteel_state_entries"].samples
    assert entries.labels["operator"] == "ranks" and entries.value == 50
    counts = {
        s.labels["phase"]: s.value
        for s in families["firesteel_batch_phase_seconds"].samples
        if s.name.endswith("_count")
    }
    phases = {"process", "write", "commit", "commit_publish", "snapshot"}
    assert counts == dict.fromkeys(phases, 2)
