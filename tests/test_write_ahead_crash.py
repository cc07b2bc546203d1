"""Crash test of the write-ahead-log sink: at-least-once, and committed segments never re-sent.

``firesteel.testing.scripts.wal_job`` sends every micro-batch through a JSON-lines WAL sink (three
segments per batch). The job is killed between sending a segment and recording
it (``wal.after_send``: the one window where a re-send can happen), between
segments (``driver.mid_commit``), after the commit, and at a random time.
Afterwards nothing is lost, and only segments that were in flight at a kill
were sent twice. The exactly-once use of the log (an upsert target, another
partition count per restart, the log on local disk and on the S3 server) is
killed in ``tests/test_crash_together.py``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from files_helpers import write_sequence_files

from firesteel.testing import (
    CrashHarness,
    assert_at_least_once,
    at_point,
    at_random,
    batch_started,
)
from firesteel.testing.scripts import script
from firesteel.testing.scripts.wal_target import read_jsonl, read_sends

pytestmark = pytest.mark.crash

JOB = script("wal_job")
FILES = 16
ROWS_PER_FILE = 20


def test_wal_sink_resends_only_segments_in_flight(
    crash_harness: CrashHarness, tmp_path: Path
) -> None:
    source = tmp_path / "in"
    write_sequence_files(source, FILES, ROWS_PER_FILE, name="{index}.parquet")
    target = tmp_path / "target.jsonl"
    checkpoint = tmp_path / "ck"
    kills = [
        at_point("wal.after_send", batch=1, partition=1),
        at_point("driver.mid_commit", batch=2),
        at_point("wal.after_send", batch=3, partition=2),
        at_random((0.0, 1.0), when=batch_started(checkpoint, 4)),
    ]
    result = crash_harness.run(
        JOB, [source, target, checkpoint, "2", "plain", "at-least-once"], kills
    )
    assert result.all_fired, result.summary()

    lines = read_jsonl(str(target))
    assert_at_least_once([r["seq"] for r in lines], range(FILES * ROWS_PER_FILE))

    sends = Counter((s["batch"], s["partition"]) for s in read_sends(str(target)))
    resent = {key for key, times in sends.items() if times > 1}
    in_flight = {(1, 1), (3, 2)}
    # A point kill after a send re-sends exactly that segment; the random kill may
    # hit one more send (or none); recorded segments are never sent again.
    assert in_flight <= resent, result.summary()
    assert all(times <= 2 for times in sends.values()), sends

    # Duplicated records come from the in-flight segments, plus at most the one
    # segment the random kill interrupted (possibly mid-send, so half written).
    copies = Counter(r["seq"] for r in lines)
    duplicated_from = {(r["_batch"], r["_partition"]) for r in lines if copies[r["seq"]] > 1}
    assert in_flight <= duplicated_from
    extra = (duplicated_from | resent) - in_flight
    assert len(extra) <= 1, (extra, result.summary())
