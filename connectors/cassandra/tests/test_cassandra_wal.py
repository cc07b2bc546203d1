"""The write-ahead-log sink (mode=wal) end to end, and SIGKILLs inside its two re-send windows.

The table is read back through cassandra-driver, never through the sink.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cassandra_support import write_seq_files

from firesteel.cassandra.wal import MID_SEND
from firesteel.core.checkpoint import read_guarantee
from firesteel.core.logs import LEVEL_ENV
from firesteel.sinks.write_ahead import AFTER_SEND
from firesteel.testing import (
    CrashHarness,
    Part,
    Spellings,
    assert_exactly_once,
    at_point,
    at_random,
    batch_started,
    in_one_run,
    task_kills,
)
from firesteel.testing.cassandra import HOSTS_ENV
from firesteel.testing.cassandra.soak import SINK_JOB, SINK_TABLE, row_is_right
from firesteel.testing.cassandra.tally import write_counts
from firesteel.testing.clock import clock_offset

pytest_plugins = ["firesteel.testing.fixtures"]

JOB = SINK_JOB
FILES = 10
CRASH_FILES = 44
"""The crash test's log input: 22 batches, for eight job kills and six batches of task kills."""
AHEAD_FILES = 60
"""The crash test's input of the upsert and map-put queries: 30 batches. They run ahead of
the log's query (they write in their tasks; seen 1.5 batches to each of the log's): their
task kills aim at batches they have not reached when the last kill strikes (the log's
batch 11)."""
AHEAD_TASK_BATCHES = range(24, 30)
MAP_TABLE = "(k bigint PRIMARY KEY, seen map<bigint, bigint>)"
"""The map-put query's table (the job's ``map`` mode: ``seen[seq] = 3 * seq`` under
``k = seq % MAP_KEYS``)."""
MAP_KEYS = 7
ROWS_PER_FILE = 20
FILES_PER_BATCH = 2


def _input(folder: Path) -> Path:
    return write_seq_files(folder, FILES, ROWS_PER_FILE)


def _wal_query(
    spark: Any,
    source: Path,
    checkpoint: Path,
    address: tuple[str, int],
    keyspace: str,
    table: str,
    **options: str,
) -> Any:
    host, port = address
    writer = (
        spark.readStream.schema("seq long")
        .option("maxFilesPerTrigger", 5)
        .parquet(str(source))
        .selectExpr("seq", "concat('body-', CAST(seq AS STRING)) AS body")
        .writeStream.format("firesteel.cassandra")
        .option("contact.points", host)
        .option("port", str(port))
        .option("keyspace", keyspace)
        .option("table", table)
        .option("mode", "wal")
        .option("committer.table", "wal_commits")
        .option("checkpointLocation", str(checkpoint))
        .options(**options)
    )
    return writer.trigger(availableNow=True).start()


def test_wal_sink_sends_committed_batches_once_and_records_them(
    spark: Any, session: Any, cluster_address: tuple[str, int], tmp_path: Path
) -> None:
    session.execute("CREATE TABLE walt (seq bigint PRIMARY KEY, body text)")
    source = _input(tmp_path / "in")
    checkpoint = tmp_path / "ck"
    query = _wal_query(spark, source, checkpoint, cluster_address, session.keyspace, "walt")
    query.awaitTermination(180)
    assert query.exception() is None
    rows = list(session.execute("SELECT seq, body FROM walt"))
    assert_exactly_once([r.seq for r in rows], range(FILES * ROWS_PER_FILE))
    assert all(r.body == f"body-{r.seq}" for r in rows)
    commits = list(session.execute("SELECT sink_id, partition, batch FROM wal_commits"))
    assert commits and {r.batch for r in commits} <= {0, 1}
    assert max(r.batch for r in commits) == 1
    (record,) = read_guarantee(str(checkpoint)).values()
    assert record["achieved"] == "exactly-once"
    # Sent segments are deleted once their batch commits; only the last plan stays.
    wal = checkpoint / "firesteel" / "wal"
    assert not [p for p in wal.rglob("*.arrow")]


def test_a_recreated_checkpoint_with_the_old_sink_id_is_refused_and_loses_nothing(
    spark: Any, session: Any, cluster_address: tuple[str, int], tmp_path: Path
) -> None:
    """Batch ids restart at 0 in a new checkpoint: the old commit rows must not skip them."""
    session.execute("CREATE TABLE walre (seq bigint PRIMARY KEY, body text)")
    source = _input(tmp_path / "in")
    checkpoint = tmp_path / "ck"
    args = (spark, source, checkpoint, cluster_address, session.keyspace, "walre")
    first = _wal_query(*args, **{"sink.id": "orders"})
    first.awaitTermination(180)
    assert first.exception() is None
    shutil.rmtree(checkpoint)
    session.execute("TRUNCATE walre")
    again = _wal_query(*args, **{"sink.id": "orders"})
    with pytest.raises(Exception, match=r"sink\.id 'orders' is recorded in"):
        again.awaitTermination(180)
    shutil.rmtree(checkpoint)
    fresh = _wal_query(*args)
    fresh.awaitTermination(180)
    assert fresh.exception() is None
    rows = list(session.execute("SELECT seq FROM walre"))
    assert_exactly_once([r.seq for r in rows], range(FILES * ROWS_PER_FILE))


def test_wal_options_are_checked(
    spark: Any, session: Any, cluster_address: tuple[str, int]
) -> None:
    from firesteel.cassandra.options import CassandraSinkOptions
    from firesteel.core.errors import ConfigError
    from firesteel.core.options import parse_options

    host, port = cluster_address
    base = {"contact.points": host, "port": str(port), "keyspace": "k", "table": "t"}
    with pytest.raises(ConfigError, match=r"mode"):
        parse_options(
            CassandraSinkOptions, {**base, "mode": "walk"}, connector="firesteel.cassandra"
        )
    with pytest.raises(ConfigError, match=r"committer\.table"):
        parse_options(
            CassandraSinkOptions, {**base, "committer.tabel": "x"}, connector="firesteel.cassandra"
        )
    connect = {**base, "send.connect": "sc://localhost:15002"}
    with pytest.raises(ConfigError, match=r"'send\.connect' .* mode=upsert writes from the"):
        parse_options(CassandraSinkOptions, connect, connector="firesteel.cassandra")
    with pytest.raises(ConfigError, match=r"'send\.connect': 'localhost:15002' is not a Spark"):
        parse_options(
            CassandraSinkOptions,
            {**connect, "mode": "wal", "send.connect": "localhost:15002"},
            connector="firesteel.cassandra",
        )
    parsed = parse_options(
        CassandraSinkOptions, {**connect, "mode": "wal"}, connector="firesteel.cassandra"
    )
    assert parsed.send_connect == "sc://localhost:15002"


IN_COMMIT = ["map", "upsert", "wal"]
"""The queries the crash driver's two commit kills gather: each waits in its driver's commit,
its writes done and ``commits/N`` not yet written, until all three are there."""


@pytest.mark.crash
def test_three_queries_killed_together_inside_the_resend_windows_and_at_random(
    crash_harness: CrashHarness, session: Any, cluster_address: tuple[str, int], tmp_path: Path
) -> None:
    """The write-ahead-log sink (query ``wal``), the upsert sink (``upsert``) and map puts
    through the upsert sink (``map``: ``write=append`` on a map column) as three queries of
    one driver (:meth:`CrashHarness.run_together`), so each whole-job SIGKILL crashes all
    three. Window 1: killed after part of a segment was written (cassandra.mid_send);
    window 2: killed after a segment was written, before it was recorded (wal.after_send);
    then kills between segments, after a write, before and after the commit, and two at
    random, each restart with another partition count for each query; the run that
    completes loses twelve tasks of each query, and Spark retries them. The first four
    kills are the log's own points (``#wal``), so its re-sends are exactly the windows'; the
    kills before and after the commit gather all three queries inside their driver's
    commits (:data:`IN_COMMIT`), so each is killed there twice. The re-sends rewrite
    identical cells: every row once, with its body, and all cells of a log batch carry
    one timestamp, later batches larger ones, although every restart
    after window 2 runs with the clock set back an hour (an NTP step, a host moved) and
    every restart spells each checkpoint otherwise. A replayed map put rewrites the same
    entry: every seq ends in its key's map exactly once, with its value."""
    wal_source = write_seq_files(tmp_path / "in", CRASH_FILES, ROWS_PER_FILE)
    ahead_source = write_seq_files(tmp_path / "ahead-in", AHEAD_FILES, ROWS_PER_FILE)
    session.execute(f"CREATE TABLE walcrash {SINK_TABLE}")
    session.execute(f"CREATE TABLE upsertcrash {SINK_TABLE}")
    session.execute(f"CREATE TABLE mapcrash {MAP_TABLE}")
    checkpoint = tmp_path / "ck"
    ahead_kills = [
        task_kills(["sink.after_write"], AHEAD_TASK_BATCHES, partitions=(0, 1), query=name)
        for name in ("upsert", "map")
    ]
    kills = [
        at_point(MID_SEND, batch=1, partition=0),
        at_point(AFTER_SEND, batch=2, partition=1),
        at_point("driver.mid_commit", batch=3),
        at_point("sink.after_write", batch=4, query="wal"),
        at_point("driver.before_commit", query=IN_COMMIT),
        at_point("driver.after_commit", query=IN_COMMIT),
        at_random((0.0, 1.0), when=batch_started(checkpoint, 7)),
        at_random((0.0, 1.0), when=batch_started(checkpoint, 11)),
        in_one_run(
            task_kills(["sink.after_write", "sink.after_pre_commit"], range(15, 21), query="wal"),
            *ahead_kills,
        ),
    ]
    # driver.mid_commit is announced between two segments: run 2 needs two partitions or more.
    partitions = {
        "wal": ["2", "3", "2", "4", "1", "3", "1", "4", "2"],
        "upsert": ["2", "3", "1", "4", "2", "3", "1", "4", "2"],
        "map": ["1", "2", "3", "1", "2", "3", "1", "2", "3"],
    }
    host, port = cluster_address

    def part(name: str, source: Path, table: str, location: Path) -> Part:
        spelled = Spellings(location)
        return Part(
            name,
            JOB,
            lambda run: [
                source,
                spelled(run),
                host,
                str(port),
                session.keyspace,
                table,
                str(FILES_PER_BATCH),
                name,
                partitions[name][run],
            ],
        )

    parts = [
        replace(
            part("wal", wal_source, "walcrash", checkpoint),
            env=lambda run: clock_offset(-3600) if run >= 2 else {},
        ),
        part("upsert", ahead_source, "upsertcrash", tmp_path / "upsert-ck"),
        part("map", ahead_source, "mapcrash", tmp_path / "map-ck"),
    ]
    result = crash_harness.run_together(parts, kills)
    assert result.fired[:3] == [
        f"{MID_SEND.name}@1:0",
        f"{AFTER_SEND.name}@2:1",
        "driver.mid_commit@3",
    ], result.summary()
    assert result.all_fired, result.summary()
    assert result.kills == 8 + 36
    assert result.exit_codes == [-9] * 8 + [0]
    assert list(result.gathered.values()) == [sorted(IN_COMMIT)] * 2, result.gathered
    for location in (checkpoint, tmp_path / "upsert-ck", tmp_path / "map-ck"):
        (record,) = read_guarantee(str(location)).values()
        assert record["achieved"] == "exactly-once", location

    upserted = list(session.execute("SELECT seq, body, attrs FROM upsertcrash"))
    assert_exactly_once([r.seq for r in upserted], range(AHEAD_FILES * ROWS_PER_FILE))
    assert all(row_is_right(r) for r in upserted), [r for r in upserted if not row_is_right(r)][:3]
    # A replayed map put rewrites the same entry: every seq once in its key's map.
    written = {row.k: dict(row.seen) for row in session.execute("SELECT k, seen FROM mapcrash")}
    expected: dict[int, dict[int, int]] = {}
    for seq in range(AHEAD_FILES * ROWS_PER_FILE):
        expected.setdefault(seq % MAP_KEYS, {})[seq] = seq * 3
    assert written == expected, result.summary()

    rows = list(session.execute("SELECT seq, body, attrs FROM walcrash"))
    assert_exactly_once([r.seq for r in rows], range(CRASH_FILES * ROWS_PER_FILE))
    assert all(row_is_right(r) for r in rows), [r for r in rows if not row_is_right(r)][:3]
    _check_sends(session, "walcrash")
    stamps: dict[int, set[int]] = {}
    for r in session.execute("SELECT seq, WRITETIME(body) AS w FROM walcrash"):
        stamps.setdefault(r.seq // (FILES_PER_BATCH * ROWS_PER_FILE), set()).add(r.w)
    assert all(len(s) == 1 for s in stamps.values()), f"a batch was stamped twice: {stamps}"
    ordered = [stamps[b].pop() for b in sorted(stamps)]
    assert ordered == sorted(set(ordered)), "a later batch carries an older write timestamp"
    # Batch 2's stamp was fixed before the clock went back: later ones can only follow it by 1.
    assert ordered[2:] == list(range(ordered[2], ordered[2] + len(ordered) - 2)), (
        f"the restarts did not run an hour behind: {ordered}"
    )


@pytest.mark.crash
@pytest.mark.cluster
def test_send_on_the_executors_of_a_standalone_cluster_survives_kills_in_both_windows(
    cluster_harness: CrashHarness, session: Any, cluster_address: tuple[str, int], tmp_path: Path
) -> None:
    """send.connect: the driver runs the Spark Connect server and each commit sends its
    segments as a Spark job, one task per segment on the cluster's two executors. Killed
    mid-send and after a send (the job: driver and the executor's Python workers), then an
    executor's Python worker killed after its send (Spark retries the task): every row once;
    the recorded segments sent once, the interrupted ones twice (a killed driver may also
    interrupt the other executor's send of its batch, never an earlier batch's); every send
    ran outside the commit's process, on both executors."""
    source = _input(tmp_path / "in")
    session.execute(f"CREATE TABLE walfan {SINK_TABLE}")
    checkpoint = tmp_path / "ck"
    host, port = cluster_address
    kills = [
        at_point(MID_SEND, batch=1, partition=0),
        at_point(AFTER_SEND, batch=2, partition=1),
        at_point(AFTER_SEND, batch=3, partition=0, mode="process"),
    ]
    spelled = Spellings(checkpoint)

    def args(run: int) -> list[object]:
        where = [source, spelled(run), host, str(port), session.keyspace, "walfan"]
        return [*where, str(FILES_PER_BATCH), "wal", "2", "executors"]

    result = cluster_harness.run(JOB, args, kills, env=lambda run: {LEVEL_ENV: "INFO"})
    assert result.fired == [
        f"{MID_SEND.name}@1:0",
        f"{AFTER_SEND.name}@2:1",
        f"{AFTER_SEND.name}@3:0",
    ], result.summary()
    assert result.exit_codes[-1] == 0, result.summary()
    rows = list(session.execute("SELECT seq, body, attrs FROM walfan"))
    assert_exactly_once([r.seq for r in rows], range(FILES * ROWS_PER_FILE))
    assert all(row_is_right(r) for r in rows)
    if not os.environ.get(HOSTS_ENV):
        sends = _sends_per_batch(session, "walfan")
        assert set(sends[0]) == set(sends[4]) == {1}, "a recorded segment was sent again"
        assert all(2 in sends[batch] for batch in (1, 2, 3)), "a kill re-sent nothing"
        # Only batch 3's partition 0 died there: its other segment went once.
        assert set(sends[3]) == {1, 2}, sends[3]
        assert max(max(counts) for counts in sends.values()) == 2
    lines = [line for log in result.logs for line in log.read_text().splitlines()]
    ran = (re.search(r"tasks ran on (\{.*\}), the commit on (\S+)$", line) for line in lines)
    places = [(ast.literal_eval(match[1]), match[2]) for match in ran if match]
    assert len(places) >= FILES // FILES_PER_BATCH, places
    assert all(commit not in tasks for tasks, commit in places), places
    assert any(len(tasks) == 2 for tasks, _ in places), f"one executor sent everything: {places}"


def _check_sends(session: Any, table: str) -> None:
    """The server's own count of writes per row: only the segments killed inside a window
    (batch 1 partition 0 mid-send, batch 2 partition 1 after its send) and whatever the
    random kills in batch 7 or later interrupted went twice; the segments recorded before
    the kill between segments of batch 3, and every other one, went once."""
    if os.environ.get(HOSTS_ENV):
        return  # a real cluster keeps no tally: the final table is checked all the same
    sends = _sends_per_batch(session, table, CRASH_FILES)
    assert set(sends[0]) == set(sends[3]) == {1}, "a recorded segment was sent again"
    assert 2 in sends[1] and 2 in sends[2], "the kills inside the windows re-sent nothing"
    assert max(max(counts) for counts in sends.values()) == 2


def _sends_per_batch(session: Any, table: str, files: int = FILES) -> dict[int, list[int]]:
    """The server's count of writes of each row, grouped by the row's batch."""
    per_batch = FILES_PER_BATCH * ROWS_PER_FILE
    sends: dict[int, list[int]] = {}
    for key, n in write_counts(session, session.keyspace, table).items():
        seq = int.from_bytes(key[0], "big", signed=True)
        sends.setdefault(seq // per_batch, []).append(n)
    assert sorted(sends) == list(range(files // FILES_PER_BATCH))
    assert all(len(counts) == per_batch for counts in sends.values())
    return sends
