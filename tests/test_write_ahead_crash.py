"""Crash test of the write-ahead-log sink: at-least-once, and committed segments never re-sent.

``firesteel.testing.scripts.wal_job`` sends every micro-batch through a JSON-lines WAL sink (three
segments per batch). The job is killed between sending a segment and recording
it (``wal.after_send``: the one window where a re-send can happen), between
segments (``driver.mid_commit``), after the commit, and at a random time.
Afterwards nothing is lost, and only segments that were in flight at a kill
were sent twice.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from files_helpers import write_sequence_files

from firesteel.testing import (
    CrashHarness,
    assert_at_least_once,
    assert_exactly_once,
    at_point,
    at_random,
    batch_started,
    task_kills,
)
from firesteel.testing.s3 import S3Server
from firesteel.testing.scripts import script
from firesteel.testing.scripts.wal_target import read_jsonl, read_sends, read_sqlite_bodies

pytestmark = pytest.mark.crash

JOB = script("wal_job")
FILES = 16
UPSERT_FILES = 26
"""Thirteen batches of two files: four job kills and three batches of task kills."""
UPSERT_KILLS = {
    "local": (at_point("driver.before_commit", batch=2), at_point("sink.after_write", batch=3)),
    "s3": (at_point("driver.mid_commit", batch=2), at_point("driver.after_commit", batch=3)),
}
"""Each store's kills after the first (a send of batch 1): together every commit point.
The path's eight whole-job kills and twelve task kills are split between the two stores,
four and six each, rather than each store paying a second full loop of JVM starts."""
SERVER_RESTARTS = (2, 4)
"""Starts before which the S3 server is killed and restarted (after the mid-commit kill
and after the random one)."""
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


@pytest.mark.parametrize("storage", ["local", "s3"])
def test_upsert_target_is_exactly_once_under_kills_that_change_the_partitions(
    crash_harness: CrashHarness, tmp_path: Path, storage: str
) -> None:
    """Four SIGKILLs of the whole job, the first right after sending a segment of batch 1
    planned with 4 partitions, then this store's two commit points and a random moment,
    each restart with another partition count; the run that completes loses a task six
    times (after a write, after a vote) and Spark retries.

    The re-run of a batch must send exactly the segments its first commit planned,
    never skip one (lost rows) nor re-plan it. The table is read back with sqlite3,
    and each row's body must be the input record.

    ``s3``: the segments, plans and commit markers live on an S3 server process, spelled
    ``s3a://`` and ``s3://`` on alternate restarts and reached through the session's
    ``spark.hadoop.fs.s3a.*``; the server is killed and restarted (with its objects,
    see :class:`~firesteel.testing.s3.S3Server`) between three crashes and their
    restarts, and its objects are listed with boto3 at the end.
    """
    source = tmp_path / "in"
    write_sequence_files(source, UPSERT_FILES, ROWS_PER_FILE, name="{index:03d}.parquet")
    target = tmp_path / "target.sqlite"
    checkpoint = tmp_path / "ck"
    kills = [
        at_point("wal.after_send", batch=1, partition=1),
        *UPSERT_KILLS[storage],
        at_random((0.0, 1.0), when=batch_started(checkpoint, 5)),
        task_kills(["sink.after_write", "sink.after_pre_commit"], range(9, 12)),
    ]
    partitions = ["4", "2", "3", "1", "3"]
    server = S3Server(tmp_path / "s3").start() if storage == "s3" else None
    bucket = server.create_bucket("wal-crash") if server else ""

    def args(run: int) -> list[object]:
        location = [S3Server.spellings(bucket, "chk")(run)] if server else []
        return [
            source,
            target,
            checkpoint,
            "2",
            "upsert",
            "exactly-once",
            partitions[run],
            *location,
        ]

    def env(run: int) -> dict[str, str]:
        """Called before each start: the S3 server is restarted after two crashes."""
        if server is None:
            return {}
        if run in SERVER_RESTARTS:
            server.restart()
        return server.job_env()

    try:
        result = crash_harness.run(JOB, args, kills, env=env)
        listed = server.client().list_objects_v2(Bucket=bucket) if server else {}
    finally:
        if server:
            server.stop()
    assert result.all_fired, result.summary()
    assert result.kills == 10
    assert result.exit_codes == [-9] * 4 + [0]

    bodies = read_sqlite_bodies(str(target))
    assert_exactly_once(list(bodies), range(UPSERT_FILES * ROWS_PER_FILE))
    assert all(body["seq"] == seq for seq, body in bodies.items())
    sends = Counter((s["batch"], s["partition"]) for s in read_sends(str(target)))
    # Batch 1 was planned with 4 segments; its re-run (2 partitions) sends the rest of them.
    assert {p for b, p in sends if b == 1} == {0, 1, 2, 3}, sends
    assert sends[(1, 1)] >= 2, "the killed segment was re-sent (the window this target absorbs)"
    if server:
        # Every batch committed: its segments and the plans before the last are gone.
        last = UPSERT_FILES // 2 - 1
        keys = [item["Key"] for item in listed.get("Contents", [])]
        assert not [k for k in keys if k.endswith(".arrow")], keys
        plans = [k for k in keys if "/plans/" in k and k.endswith(".json")]
        assert plans == [f"chk/wal/wal-crash/plans/{last}.json"], keys
