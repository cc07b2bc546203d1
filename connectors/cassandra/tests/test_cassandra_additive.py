"""Counter tables (``write=increment``) and list / set / map appends (``write=append``), read
back by the driver.

Through the write-ahead-log sink, whatever the restart changes (partition
count, checkpoint spelling), a kill loses nothing, and only a kill inside one
of the two re-send windows adds a segment twice: the sink is at-least-once,
and says so. A repeated list append duplicates, a repeated set union does not.
Map puts go through the upsert sink: killed anywhere, they end exactly as written
(``test_cassandra_wal.py``'s crash test runs them beside the log and upsert queries).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from cassandra_support import write_seq_files

from firesteel.cassandra.options import CassandraSinkOptions
from firesteel.cassandra.statement import RowStatement
from firesteel.core.checkpoint import read_guarantee
from firesteel.core.errors import ConfigError
from firesteel.core.options import parse_options
from firesteel.sinks.write_ahead import AFTER_SEND
from firesteel.testing import CrashHarness, Spellings, at_point
from firesteel.testing.cassandra.soak import SINK_JOB

pytest_plugins = ["firesteel.testing.fixtures"]

FILES = 10
ROWS_PER_FILE = 20
FILES_PER_BATCH = 2
KEYS = 7
TABLES = {
    "counter": "CREATE TABLE {} (k bigint PRIMARY KEY, hits counter, total counter)",
    "append": "CREATE TABLE {} (k bigint PRIMARY KEY, seqs list<bigint>)",
    "map": "CREATE TABLE {} (k bigint PRIMARY KEY, seen map<bigint, bigint>)",
}
"""The table of each additive mode of :data:`SINK_JOB`, written under ``k = seq % KEYS``."""


def _options(**extra: str) -> CassandraSinkOptions:
    base = {"contact.points": "127.0.0.1", "keyspace": "k", "table": "t"}
    return parse_options(CassandraSinkOptions, {**base, **extra}, connector="firesteel.cassandra")


def test_increment_options_are_checked_up_front() -> None:
    with pytest.raises(ConfigError, match=r"option 'write'.*mode=wal"):
        _options(write="increment")
    with pytest.raises(ConfigError, match=r"option 'ttl' cannot be used with write=increment"):
        _options(write="increment", mode="wal", ttl="60")
    with pytest.raises(ConfigError, match=r"'timestamp\.column' cannot be used"):
        _options(write="increment", mode="wal", **{"timestamp.column": "ts"})
    with pytest.raises(ConfigError, match=r"write"):
        _options(write="add", mode="wal")


def test_counter_tables_and_increments_are_matched_naming_the_column(session: Any) -> None:
    session.execute(TABLES["counter"].format("hitcount"))
    session.execute("CREATE TABLE plain (k bigint PRIMARY KEY, v bigint)")
    keyspace = session.keyspace
    schema = pa.schema([("k", pa.int64()), ("hits", pa.int64())])
    wal = {"keyspace": keyspace, "mode": "wal"}
    inserting = RowStatement(_options(**wal, table="hitcount"), schema)
    with pytest.raises(ConfigError, match=r"'hits' of .*hitcount is a counter.*write=increment"):
        inserting.prepare(session)
    not_counters = RowStatement(_options(**wal, table="plain", write="increment"), schema)
    with pytest.raises(ConfigError, match=r"needs a counter table; .*plain has none"):
        not_counters.prepare(session)
    keyless = RowStatement(
        _options(**wal, table="hitcount", write="increment"), pa.schema([("hits", pa.int64())])
    )
    with pytest.raises(ConfigError, match=r"primary-key column 'k' .* missing"):
        keyless.prepare(session)
    statement = RowStatement(_options(**wal, table="hitcount", write="increment"), schema)
    prepared = statement.prepare(session)
    assert not prepared.is_idempotent, "the driver must never retry an increment on its own"
    batch = pa.record_batch({"k": [1, 1, 2], "hits": [5, None, 2]})
    statement.execute(session, prepared, [batch], "test")
    rows = {r.k: r.hits for r in session.execute("SELECT k, hits FROM hitcount")}
    assert rows == {1: 5, 2: 2}


def test_appends_are_matched_to_collections_naming_the_column(session: Any) -> None:
    session.execute("CREATE TABLE lists (k bigint PRIMARY KEY, seqs list<bigint>, v bigint)")
    session.execute("CREATE TABLE tags (k bigint PRIMARY KEY, tags set<text>)")
    keyspace = session.keyspace
    frame = pa.schema([("k", pa.int64()), ("seqs", pa.list_(pa.int64()))])
    upsert = RowStatement(_options(keyspace=keyspace, table="lists", write="append"), frame)
    with pytest.raises(ConfigError, match=r"column 'seqs' of .*lists is a list.*mode=wal"):
        upsert.prepare(session)
    wal = {"keyspace": keyspace, "mode": "wal", "write": "append"}
    scalars = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    with pytest.raises(ConfigError, match=r"needs a list, set or map column"):
        RowStatement(_options(**wal, table="lists"), scalars).prepare(session)
    regular = pa.schema([*frame, ("v", pa.int64())])
    with pytest.raises(ConfigError, match=r"Non PRIMARY KEY columns found in where clause: v"):
        RowStatement(_options(**wal, table="lists"), regular).prepare(session)

    stamped = pa.schema([*frame, ("ts", pa.int64())])
    lists = RowStatement(_options(**wal, table="lists", **{"timestamp.column": "ts"}), stamped)
    prepared = lists.prepare(session)
    assert not prepared.is_idempotent, "the driver must never retry a list append on its own"
    batch = pa.record_batch(
        {"k": [1, 2, 1], "seqs": [[10, 11], None, [12]], "ts": [5, 5, 6]}, schema=stamped
    )
    lists.execute(session, prepared, [batch], "test")
    lists.execute(session, prepared, [batch.slice(2)], "test")
    rows = {r.k: r.seqs for r in session.execute("SELECT k, seqs FROM lists")}
    assert rows == {1: [10, 11, 12, 12]}, "a null list appends nothing; a repeat appends again"

    tags = RowStatement(
        _options(keyspace=keyspace, table="tags", write="append"),
        pa.schema([("k", pa.int64()), ("tags", pa.list_(pa.string()))]),
    )
    prepared = tags.prepare(session)
    assert prepared.is_idempotent, "a set union repeated changes nothing: it may be retried"
    batch = pa.record_batch({"k": [1, 1], "tags": [["b", "a"], ["c", "a"]]})
    for _ in range(2):
        tags.execute(session, prepared, [batch], "test")
    assert {r.k: set(r.tags) for r in session.execute("SELECT k, tags FROM tags")} == {
        1: {"a", "b", "c"}
    }


def test_map_entries_are_put_idempotently_or_the_map_replaced_whole(session: Any) -> None:
    session.execute("CREATE TABLE attrs (k bigint PRIMARY KEY, attrs map<text, bigint>)")
    keyspace = session.keyspace
    frame = pa.schema([("k", pa.int64()), ("attrs", pa.map_(pa.string(), pa.int64()))])
    appending = RowStatement(_options(keyspace=keyspace, table="attrs", write="append"), frame)
    prepared = appending.prepare(session)
    assert prepared.is_idempotent, "a map put repeated changes nothing: it may be retried"
    batch = pa.record_batch(
        {"k": [1, 2, 1], "attrs": [[("a", 1), ("b", 2)], None, [("b", 3), ("c", 4)]]},
        schema=frame,
    )
    for _ in range(2):
        appending.execute(session, prepared, [batch], "test")
    rows = {r.k: r.attrs for r in session.execute("SELECT k, attrs FROM attrs")}
    assert rows == {1: {"a": 1, "b": 3, "c": 4}}, "entries merge by key; a null map adds none"

    inserting = RowStatement(_options(keyspace=keyspace, table="attrs"), frame)
    replaced = pa.record_batch({"k": [1], "attrs": [[("z", 9)]]}, schema=frame)
    inserting.execute(session, inserting.prepare(session), [replaced], "test")
    assert session.execute("SELECT attrs FROM attrs WHERE k = 1").one().attrs == {"z": 9}

    wrong = pa.schema([("k", pa.int64()), ("attrs", pa.map_(pa.string(), pa.string()))])
    with pytest.raises(
        ConfigError, match=r"'attrs' is map<string, string> .* but map<\w+, bigint>"
    ):
        RowStatement(_options(keyspace=keyspace, table="attrs"), wrong).prepare(session)


def _input(folder: Path) -> Path:
    return write_seq_files(folder, FILES, ROWS_PER_FILE)


def _expected() -> tuple[Counter[int], Counter[int]]:
    hits: Counter[int] = Counter()
    total: Counter[int] = Counter()
    for seq in range(FILES * ROWS_PER_FILE):
        hits[seq % KEYS] += 1
        total[seq % KEYS] += seq
    return hits, total


def _excess(session: Any, mode: str, table: str) -> dict[int, int]:
    """How many times more than once each unit arrived (negative: lost): per key for
    counters (its ``hits``, whose ``total`` must not fall short), per seq for appends."""
    hits, total = _expected()
    if mode == "counter":
        rows = list(session.execute(f"SELECT k, hits, total FROM {table}"))
        assert all(r.total >= total[r.k] for r in rows), "increments of 'total' lost"
        return {k: -n for k, n in hits.items()} | {r.k: r.hits - hits[r.k] for r in rows}
    arrived: Counter[int] = Counter()
    for row in session.execute(f"SELECT k, seqs FROM {table}"):
        assert all(seq % KEYS == row.k for seq in row.seqs), row
        arrived.update(row.seqs)
    return {seq: arrived[seq] - 1 for seq in range(FILES * ROWS_PER_FILE)} | {
        seq: n - 1 for seq, n in arrived.items()
    }


def _run(
    harness: CrashHarness,
    session: Any,
    address: tuple[str, int],
    tmp_path: Path,
    mode: str,
    kills: list[Any],
    name: str,
) -> Any:
    source = _input(tmp_path / "in")
    table = f"{mode}_{name}"
    session.execute(TABLES[mode].format(table))
    checkpoint = tmp_path / "ck"
    spelled = Spellings(checkpoint)
    host, port = address

    def args(run: int) -> list[object]:
        # Another partition count and spelling on every restart.
        batch = [str(FILES_PER_BATCH), mode, str(1 + run % 3)]
        return [source, spelled(run), host, str(port), session.keyspace, table, *batch]

    result = harness.run(SINK_JOB, args, kills)
    (record,) = read_guarantee(str(checkpoint)).values()
    assert record["achieved"] == "at-least-once"
    return result, table


@pytest.mark.crash
@pytest.mark.parametrize("mode", ["counter", "append"])
def test_kills_lose_nothing_and_add_at_most_the_segment_of_a_resend_window_twice(
    crash_harness: CrashHarness,
    session: Any,
    cluster_address: tuple[str, int],
    tmp_path: Path,
    mode: str,
) -> None:
    """Killed between two segments of a commit (outside the re-send windows) and once
    inside one (after a segment was sent, before it was recorded), with another
    partition count and spelling on every restart: nothing is lost, and only that
    segment (at most one batch's rows) arrives twice, the documented at-least-once
    window. Two kills, not eight: an at-least-once path (issue 30 keeps eight whole-job
    kills for the exactly-once ones); the WAL sink's own test kills this commit code
    eight times, and the WAL insert tests prove from the server's write counts that the
    segments outside a window go exactly once."""
    kills = [
        at_point(AFTER_SEND, batch=1, partition=0),
        # The second run has two partitions, so batch 2's commit has two segments to be between.
        at_point("driver.mid_commit", batch=2),
    ]
    result, table = _run(crash_harness, session, cluster_address, tmp_path, mode, kills, "kills")
    assert result.kills == 2 and f"{AFTER_SEND.name}@1:0" in result.fired, result.summary()
    excess = _excess(session, mode, table)
    assert all(n >= 0 for n in excess.values()), f"lost: {excess}"
    assert 0 < sum(excess.values()) <= FILES_PER_BATCH * ROWS_PER_FILE, excess
    if mode == "append":
        assert max(excess.values()) == 1, f"an element arrived three times or more: {excess}"
