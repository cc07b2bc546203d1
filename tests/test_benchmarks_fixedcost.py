"""The fixedcost benchmark group's own logic: firesteel's timing records and how a batch's
phases are taken from them. No job runs here (each is a JVM); ``python -m benchmarks
fixedcost --quick`` runs the group's query path."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from firesteel.core.logs import timed
from firesteel.core.phases import CommitMetrics, measuring

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _benchmarks_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    # benchmarks/ is a folder of the repository, not an installed package.
    monkeypatch.syspath_prepend(str(ROOT))


def test_a_timed_step_logs_a_record_the_benchmark_reads_back_only_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from benchmarks.phases import parse_timings

    with caplog.at_level(logging.INFO, logger="firesteel.timing"), timed("sink.commit"):
        pass
    assert caplog.messages == []
    with caplog.at_level(logging.DEBUG, logger="firesteel.timing"), timed("sink.commit"):
        pass
    [record] = parse_timings(f"INFO x: {message}" for message in caplog.messages)
    assert record.phase == "sink.commit" and record.pid == os.getpid() and record.ms >= 0


def test_a_timed_commit_step_with_a_phase_feeds_the_commit_metrics_whatever_the_level(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One timer per step: the DEBUG record the benchmark reads and the commit's phase in
    the batch's record come from the same block, and the phase is kept at any level."""
    from benchmarks.phases import parse_timings

    metrics = CommitMetrics()
    with measuring(metrics):
        with caplog.at_level(logging.INFO, logger="firesteel.timing"), timed("wal.plan", "plan"):
            pass
        with caplog.at_level(logging.DEBUG, logger="firesteel.timing"), timed("wal.send", "send"):
            pass
    assert set(metrics.phases) == {"plan", "send"}
    [record] = parse_timings(f"INFO x: {message}" for message in caplog.messages)
    assert record.phase == "wal.send"
    assert record.ms == pytest.approx(metrics.phases["send"] * 1000, abs=0.01)


def test_phases_of_a_batch_are_the_records_that_began_in_its_trigger_window() -> None:
    from benchmarks.phases import FIRESTEEL, NEW_PROCESSES, SPARK, Timing, batch_phases, medians

    batches = [
        {
            "timestamp": "2026-11-28T21:00:00.000Z",
            "durationMs": {"triggerExecution": 500, "addBatch": 300},
        },
        {
            "timestamp": "2026-11-28T21:00:01.000Z",
            "durationMs": {"triggerExecution": 400, "addBatch": 200},
        },
    ]
    start = 1_795_899_600.0  # 2026-11-28T21:00:00Z
    timings = [
        Timing("sink.write", 90.0, start + 0.1, 11),
        Timing("sink.write", 40.0, start + 0.1, 12),  # a parallel task: the slowest counts
        Timing("wal.send", 10.0, start + 0.3, 20),
        Timing("wal.send", 15.0, start + 0.35, 20),  # one commit, two segments: they add up
        Timing("sink.write", 30.0, start + 1.1, 11),
        Timing("wal.send", 5.0, start + 1.3, 21),
        Timing("wal.send", 99.0, start + 2.0, 21),  # after both windows: no batch's
        Timing("source.latest_offset", 7.0, start + 0.5, 30),  # the next trigger's, at once
    ]
    first, second = batch_phases(batches, timings)
    assert first["sink.write"] == 90.0 and first["wal.send"] == 25.0
    assert first["addBatch"] == 300.0 and first[NEW_PROCESSES] == 3.0
    assert first[FIRESTEEL] == 90.0 and first[SPARK] == 410.0  # wal.send is in sink.commit
    assert second["sink.write"] == 30.0 and second["wal.send"] == 5.0
    assert second[NEW_PROCESSES] == 1.0  # process 21 is new; 11 was seen before
    assert medians([first, second])["wal.send"] == 15.0
