"""Crash tests of the file sink, keyed state on two backends, broadcast state and the
write-ahead-log sink, sharing their kills.

Five exactly-once paths (``tests/crash_paths.py``) run as queries of one
driver (:meth:`~firesteel.testing.CrashHarness.run_together`): files -> map ->
file sink; files -> keyed state with timers (filesystem backend) -> file sink; the
same on the RocksDB backend (``firesteel-rocksdb``); files -> write-ahead-log sink
-> SQLite upserts; files + a rules stream (broadcast state) -> keyed ranking -> file
sink (in the local run only: it has no object-store half, and each query a group
runs pays its own start-up at every restart, about 10 s of Spark's Python
runners). Every SIGKILL of the whole job crashes all of them, each wherever
it is, and each restarts from its own checkpoint, so each path gets every kill of
the run for the price of one restart of Spark (issue 30: the restarts are most of
a crash test's time).

The test runs twice: with everything local, and with the object-store halves on
the S3 server process (the file sink's output, both backends' snapshots, the log's
segments, plans and commit markers).
Kafka -> file sink on S3 runs with the Kafka crash test's queries
(``connectors/kafka/tests/test_kafka_crash.py``): from the second restart on,
this group's clock runs an hour behind (the state path's timers), which
librdkafka cannot run under (see :mod:`firesteel.testing.clock`).

The local run kills the whole job five times and the S3 run four, so each path
gets nine whole-job SIGKILLs over the two stores (each restart of a group costs
the JVM's start once and every query's own start-up again: issue 30 asks for at
least eight): in each store the first right after a write-ahead-log send of
batch 1 planned with 4 partitions (the log's re-send window), then a RocksDB
upload (local) or restore (S3), the state snapshot, the file sink's commit
(gathered: every query writing through it waits inside its own commit until all
are there, so one kill lands inside each of their commits), and a random moment.
A point aimed at one query (``#name``) is reached by that query, in its tasks or
its driver's commit. The run that
completes loses six tasks of each query (after a snapshot, an upload, a write, a
vote), which Spark retries. On S3 the server is killed and restarted, keeping its
objects, between two crashes and their restarts. Every path's output is counted by
a reader that is not firesteel's (pyarrow's dataset reader, boto3, sqlite3): 0
lost, 0 duplicated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest
from crash_paths import BroadcastJob, FilesJob, RocksJob, StateJob, WalUpsertJob

from firesteel.rocksdb.store import MID_RESTORE, MID_UPLOAD
from firesteel.testing import (
    AtPoints,
    CrashHarness,
    Kill,
    at_point,
    at_random,
    batch_started,
    in_one_run,
    task_kills,
)
from firesteel.testing.s3 import S3Server

pytestmark = [pytest.mark.crash, pytest.mark.timeout(900)]

TASK_KILLS = {
    "rocksdb": ([MID_UPLOAD.name, "sink.after_write", "sink.after_pre_commit"], range(8, 10)),
    "files": (["sink.after_write", "sink.after_pre_commit"], range(9, 12)),
    "state": (["state.after_snapshot", "sink.after_write", "sink.after_pre_commit"], range(9, 11)),
    "wal": (["sink.after_write", "sink.after_pre_commit"], range(9, 12)),
    "broadcast": (
        ["state.after_snapshot", "sink.after_write", "sink.after_pre_commit"],
        range(9, 11),
    ),
}
"""Six task kills per query in the run that completes, aimed at that query's tasks (a
RocksDB task also mid-upload)."""
SERVER_RESTARTS = (2, 4)
"""On S3: starts before which the server is killed and restarted with its objects."""


FILE_SINK_QUERIES = {
    "local": ["files", "state", "rocksdb", "broadcast"],
    "s3": ["files", "state", "rocksdb"],
}
"""The queries writing through the file sink, whose commit (the manifest, then the moves that
publish its files) the group's commit-window kills gather."""


def whole_job_kills(store: str, files: FilesJob) -> list[Kill]:
    """This store's whole-job kills (five local, four on S3: each path gets nine, the
    issue's eight and one). Every path is killed inside its batch's commit in both stores:
    the write-ahead log between the sends of a batch (``wal.after_send``), the file-sink
    paths gathered in their driver's commits (each query waits at the point until all have
    reached it: one kill inside four commits), locally both mid-publish and between the
    commit and Spark's ``commits/N``. With the other store's, every point but two
    (``driver.before_commit``: the task kills' ``sink.after_pre_commit`` vote precedes it,
    and the Cassandra and Kafka drivers kill there; ``sink.after_pre_commit``, which the
    task kills take in every path: a kill there gave way to a second commit-window kill)."""
    after_send = at_point("wal.after_send", batch=1, partition=1)
    in_commits = FILE_SINK_QUERIES[store]
    if store == "local":
        return [
            after_send,
            at_point(MID_UPLOAD, query="rocksdb"),
            at_point("driver.mid_commit", query=in_commits),
            at_point("driver.after_commit", query=in_commits),
            at_random((0.0, 1.0), when=batch_started(files.checkpoint, 5)),
        ]
    return [
        after_send,
        at_point("state.after_snapshot", query="state"),
        at_point("driver.mid_commit", query=in_commits),
        at_point(MID_RESTORE, query="rocksdb"),
    ]


def task_kills_per_query(names: list[str]) -> AtPoints:
    """One run's task kills: six aimed at each query named."""
    return in_one_run(*(task_kills(*TASK_KILLS[name], query=name) for name in names))


@pytest.mark.parametrize("store", ["local", "s3"])
def test_paths_killed_together_at_protocol_points_and_at_random(tmp_path: Path, store: str) -> None:
    """Five (local) or four (S3) whole-job SIGKILLs crashing every path of the group,
    each restart changing what users change (the checkpoint's spelling, the operators'
    parallelism, the partition count, the clock an hour behind, ``s3a://`` /
    ``s3://``); then six task kills per path."""
    server = S3Server(tmp_path / "s3").start() if store == "s3" else None
    try:
        files = FilesJob(tmp_path / "files", server)
        state = StateJob(tmp_path / "state", server)
        rocks = RocksJob(tmp_path / "rocksdb", server)
        wal = WalUpsertJob(tmp_path / "wal", server)

        def wal_env(run: int) -> Mapping[str, str]:
            """Called before each start: on S3 the server restarts before two of them."""
            if server is not None and run in SERVER_RESTARTS:
                server.restart()
            return wal.env(run)

        paths = [files, state, rocks, wal]
        parts = [files.part(), state.part(), rocks.part(), replace(wal.part(), env=wal_env)]
        if server is None:
            # Broadcast state has no object-store half of its own: the local run takes it.
            broadcast = BroadcastJob(tmp_path / "broadcast")
            paths.append(broadcast)
            parts.append(broadcast.part())
        names = [part.name for part in parts]
        whole_job = whole_job_kills(store, files)
        kills = [*whole_job, task_kills_per_query(names)]
        # Four or five queries share two cores: the run that completes takes longer than one
        # job's.
        with CrashHarness(tmp_path / "harness", timeout=480) as harness:
            result = harness.run_together(parts, kills)
        assert result.all_fired, result.summary()
        assert result.kills == len(whole_job) + 6 * len(paths)
        assert result.exit_codes == [-9] * len(whole_job) + [0]
        gathered = [sorted(queries) for queries in result.gathered.values()]
        expected = 2 if store == "local" else 1
        assert gathered == [sorted(FILE_SINK_QUERIES[store])] * expected, result.gathered
        for path in paths:
            path.check(result)
    finally:
        if server is not None:
            server.stop()
