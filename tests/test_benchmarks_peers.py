"""The peers benchmark group's own logic, without the peers: no virtual environment is
created here (installing apache-flink takes minutes), no broker is started."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from firesteel.testing.processes import gone

ROOT = Path(__file__).resolve().parent.parent
ALLOCATE_MB = 150


@pytest.fixture(autouse=True)
def _benchmarks_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    # benchmarks/ is a folder of the repository, not an installed package.
    monkeypatch.syspath_prepend(str(ROOT))


def test_job_events_are_json_lines_with_an_event_and_nothing_else_is() -> None:
    from benchmarks.peers.job import parse_event

    assert parse_event('{"event": "ready"}\n') == {"event": "ready"}
    assert parse_event("INFO: {not json") is None
    assert parse_event('{"no_event": 1}') is None
    assert parse_event("[1, 2]") is None


def test_latency_records_carry_their_produce_time_in_their_first_20_digits() -> None:
    from benchmarks.peers.watch import produce_stamp

    assert (
        produce_stamp(b"%020d" % 1_764_000_000_123_456_789 + b"x" * 80) == 1_764_000_000_123_456_789
    )


def _grandchild_script(tmp_path: Path) -> list[str]:
    """A process that starts a child holding ALLOCATE_MB, says ready, and waits."""
    script = tmp_path / "tree.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, subprocess, sys, time
            child = subprocess.Popen([sys.executable, "-c",
                "import sys, time; block = bytearray({ALLOCATE_MB} * 2**20); "
                "block[::4096] = b'x' * len(block[::4096]); print('held', flush=True); "
                "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
            child.stdout.readline()
            print("starting", flush=True)
            print(json.dumps({{"event": "ready"}}), flush=True)
            time.sleep(60)
            """
        ),
        encoding="utf-8",
    )
    return [sys.executable, str(script)]


def test_a_jobs_peak_memory_counts_the_processes_it_started(tmp_path: Path) -> None:
    from benchmarks.peers.job import Job, tree_memory

    with Job(_grandchild_script(tmp_path)) as job:
        assert job.wait_ready(60) > 0
        root = psutil.Process(job._process.pid)  # type: ignore[union-attr]
        children = root.children(recursive=True)
        assert len(children) == 1
        # The child alone holds the allocation (its own pages): both sums include it.
        rss, pss = tree_memory(root)
        assert rss >= root.memory_info().rss + ALLOCATE_MB * 2**20
        assert ALLOCATE_MB * 2**20 <= pss <= rss
        deadline = time.monotonic() + 10
        while job.peak_pss_mb < ALLOCATE_MB and time.monotonic() < deadline:
            time.sleep(0.1)
        assert job.peak_rss_mb >= job.peak_pss_mb >= ALLOCATE_MB
        assert job.output == ["starting"]
    # Leaving the block kills the whole group, the grandchild included (a killed orphan
    # stays a zombie until whatever adopted it reaps it; SIGKILL lands asynchronously).
    deadline = time.monotonic() + 10
    while not all(gone(child) for child in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(gone(child) for child in children)


def test_a_job_that_fails_before_ready_is_reported_with_its_output(tmp_path: Path) -> None:
    from benchmarks.peers.job import Job, JobError

    with Job([sys.executable, "-c", "print('no broker at nowhere:9'); raise SystemExit(3)"]) as job:
        with pytest.raises(JobError, match="no broker at nowhere:9"):
            job.wait_ready(60)
        with pytest.raises(JobError, match="status 3"):
            job.wait_exit(60)


def test_a_peer_env_is_reused_only_after_a_finished_install_of_its_exact_version(
    tmp_path: Path,
) -> None:
    from benchmarks.peers.venv import MARKER, PeerEnv

    env = PeerEnv("quixstreams", "3.28.1", root=tmp_path)
    assert env.folder == tmp_path / "quixstreams-3.28.1"
    assert env.requirement == "quixstreams==3.28.1"
    assert not env.installed()
    env.python.parent.mkdir(parents=True)
    env.python.write_text("", encoding="utf-8")
    assert not env.installed()  # the install never finished: no marker
    (env.folder / MARKER).write_text("quixstreams==3.27.0", encoding="utf-8")
    assert not env.installed()
    (env.folder / MARKER).write_text("quixstreams==3.28.1", encoding="utf-8")
    assert env.installed()
    assert env.ensure() == env.python  # reused: nothing is run


def test_peers_are_pinned_and_live_under_the_firesteel_cache() -> None:
    from benchmarks.peers.venv import CACHE, PYFLINK, QUIX
    from firesteel.testing.jvm import cache_dir

    assert QUIX.package == "quixstreams" and PYFLINK.package == "apache-flink"
    for env in (QUIX, PYFLINK):
        assert env.version.count(".") == 2
        assert env.folder.parent == CACHE == cache_dir() / "peers"


def test_the_peers_cache_moves_with_firesteel_cache_dir(tmp_path: Path) -> None:
    # A fresh process: the cache is read when the module is imported.
    from firesteel.testing.jvm import CACHE_ENV

    shown = subprocess.run(
        [sys.executable, "-c", "from benchmarks.peers.venv import QUIX; print(QUIX.folder)"],
        cwd=ROOT,
        env={**os.environ, CACHE_ENV: str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(shown) == tmp_path / "peers" / "quixstreams-3.28.1"


def test_a_goal_workload_reads_every_recorded_figure_in_order() -> None:
    from benchmarks import bench_peers

    bench_peers._record("k", 1.0)
    bench_peers._record("k", 2.0)
    try:
        first, second = bench_peers.recorded("k"), bench_peers.recorded("k")
        assert [first(), first()] == [1.0, 2.0]
        assert second() == 1.0  # another goal on the same runs starts at the first
        with pytest.raises(RuntimeError, match="no figure 2 recorded under 'k'"):
            first()
    finally:
        bench_peers._RUN.recorded.clear()


def test_a_shared_peer_run_stands_beside_each_consumer_once_per_repetition() -> None:
    from benchmarks.bench_peers import shared

    runs = iter([10.0, 20.0, 30.0])
    consumers = shared(lambda: next(runs))
    first, second = consumers(), consumers()
    assert [first(), second(), second(), first()] == [10.0, 10.0, 20.0, 20.0]
    assert second() == 30.0  # a run nobody asked for yet is run


def _writer_script(tmp_path: Path, files: int) -> list[str]:
    """A job that says ready, then every 0.2 s commits a file of 10 lines the way Flink's
    FileSink does (written hidden, then renamed), ``files`` files in all, then exits."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    script = tmp_path / "writer.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, os, sys, time
            out = sys.argv[1]
            os.makedirs(out)
            print(json.dumps({{"event": "ready"}}), flush=True)
            for index in range({files}):
                time.sleep(0.2)
                hidden = os.path.join(out, f".part-{{index}}.inprogress")
                with open(hidden, "w") as part:
                    part.write("k,1\\n" * 10)
                os.rename(hidden, os.path.join(out, f"part-{{index}}"))
            """
        ),
        encoding="utf-8",
    )
    return [sys.executable, str(script), str(tmp_path / "out")]


def test_a_job_that_cannot_finish_within_the_budget_is_measured_over_that_window(
    tmp_path: Path,
) -> None:
    from benchmarks.peers.job import Job
    from benchmarks.peers.window import FinishedLines, measure

    job = Job(_writer_script(tmp_path, 10_000))
    started = time.monotonic()
    seen = measure(job, FinishedLines(tmp_path / "out"), 100_000, budget_s=3, timeout_s=60)
    assert not seen.finished
    # Its whole input takes 2,000 s: bounds far below that show it was stopped at the
    # budget, whatever the machine's load, without timing the measurement itself.
    assert 3 <= seen.window_s < 60 and time.monotonic() - started < 120
    assert job._process.poll() is not None  # type: ignore[union-attr]  # stopped once measured
    assert seen.in_window > 0 and seen.rate == pytest.approx(seen.in_window / seen.window_s)
    # Whole files only, and no more than the writer can commit in the window (a file at
    # most every 0.2 s; +2 for files renamed while the first or last count was scanning).
    assert seen.in_window % 10 == 0
    assert seen.in_window <= 10 * (seen.window_s / 0.2 + 2)
    # The window starts at the first committed output: that file is not in it.
    assert FinishedLines(tmp_path / "out")() >= seen.in_window + 10


def test_a_job_that_finishes_within_the_budget_is_measured_whole_and_checked(
    tmp_path: Path,
) -> None:
    from benchmarks.peers.job import Job, JobError
    from benchmarks.peers.window import FinishedLines, measure

    whole = measure(
        Job(_writer_script(tmp_path / "a", 5)), FinishedLines(tmp_path / "a" / "out"), 50, 60, 60
    )
    assert whole.finished and whole.window_s == 0 and whole.in_window == 0
    assert 0 < whole.rate <= 50  # five files 0.2 s apart: at least 1 s from ready to exit
    with pytest.raises(JobError, match="accounts for 50 events of 60"):
        measure(
            Job(_writer_script(tmp_path / "b", 5)),
            FinishedLines(tmp_path / "b" / "out"),
            60,
            60,
            60,
        )


def test_a_measured_runs_note_and_the_load_are_in_the_report() -> None:
    from benchmarks.framework import Figure, Workload
    from benchmarks.report import markdown
    from benchmarks.runner import run_workload

    entry = run_workload(
        Workload(
            group="peers",
            name="w",
            unit="events/s",
            baseline_name="peer",
            goal=None,
            firesteel=lambda: 2.0,
            baseline=lambda: Figure(1.0, {}, "rate over a 240 s window; it did not finish"),
            repetitions=2,
            warmup=0,
        ),
        progress=False,
    )
    assert entry["baseline"]["notes"] == ["rate over a 240 s window; it did not finish"]
    assert len(entry["load"]) == 2
    text = markdown([{"group": "peers", "status": "ok", "workloads": [entry]}], "results")
    assert "  - peer: rate over a 240 s window; it did not finish" in text
    assert "load (1 min average) at start / end" in text
