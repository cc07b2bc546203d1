"""Crash test of the upsert sink: SIGKILL at fault points and at random, counted by the driver.

The CQL server is its own process (started by the ``cluster_address``
fixture), so it outlives every killed job, as a real cluster would. Every
restart spells the checkpoint otherwise than the run it recovers and writes
with another partition count; the run that completes loses tasks, which
Spark retries. ``python -m firesteel.testing.cassandra.soak upsert`` runs the
same path for as many cycles as wanted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from firesteel.testing import (
    CrashHarness,
    Spellings,
    assert_exactly_once,
    at_point,
    at_random,
    batch_started,
    task_kills,
)
from firesteel.testing.cassandra.soak import SINK_JOB, SINK_TABLE, row_is_right

pytest_plugins = ["firesteel.testing.fixtures"]

JOB = SINK_JOB
FILES = 44
ROWS_PER_FILE = 20


@pytest.mark.crash
def test_upsert_sink_is_exactly_once_under_sigkill(
    crash_harness: CrashHarness, session: Any, cluster_address: tuple[str, int], tmp_path: Path
) -> None:
    source = tmp_path / "in"
    source.mkdir()
    for index in range(FILES):
        seqs = list(range(index * ROWS_PER_FILE, (index + 1) * ROWS_PER_FILE))
        pq.write_table(pa.table({"seq": seqs}), source / f"{index:03d}.parquet")
    session.execute(f"CREATE TABLE crash {SINK_TABLE}")
    checkpoint = tmp_path / "ck"
    kills = [
        at_point("sink.after_write", batch=1, partition=0),
        at_point("driver.before_commit", batch=2),
        at_point("driver.after_commit", batch=3),
        at_point("sink.after_write", batch=4, partition=1),
        at_point("driver.before_commit", batch=5),
        at_point("driver.after_commit", batch=6),
        at_random((0.0, 1.0), when=batch_started(checkpoint, 7)),
        at_random((0.0, 1.0), when=batch_started(checkpoint, 11)),
        task_kills(["sink.after_write"], range(15, 21), partitions=(0, 1)),
    ]
    partitions = ["2", "3", "1", "4", "2", "3", "1", "4", "2"]
    host, port = cluster_address
    spelled = Spellings(checkpoint)
    result = crash_harness.run(
        JOB,
        lambda run: [
            source,
            spelled(run),
            host,
            str(port),
            session.keyspace,
            "crash",
            "2",
            "upsert",
            partitions[run],
        ],
        kills,
    )
    assert result.all_fired, result.summary()
    assert result.kills == 20
    assert result.exit_codes == [-9] * 8 + [0]

    rows = list(session.execute("SELECT seq, body, attrs FROM crash"))
    assert_exactly_once([r.seq for r in rows], range(FILES * ROWS_PER_FILE))
    assert all(row_is_right(r) for r in rows), [r for r in rows if not row_is_right(r)][:3]
