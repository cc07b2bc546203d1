"""Counter tables through the write-ahead-log sink (``write=increment``), read back by the driver.

Outside the two re-send windows every increment arrives once, whatever the
restart changes (partition count, checkpoint spelling); inside one, a crash
adds one segment twice: the sink is at-least-once, and says so.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from firesteel.cassandra.options import CassandraSinkOptions
from firesteel.cassandra.statement import RowStatement
from firesteel.cassandra.testing.soak import SINK_JOB
from firesteel.core.checkpoint import read_guarantee
from firesteel.core.errors import ConfigError
from firesteel.core.options import parse_options
from firesteel.sinks.write_ahead import AFTER_SEND
from firesteel.testing import CrashHarness, Spellings, at_point

pytest_plugins = ["firesteel.testing.fixtures"]

FILES = 10
ROWS_PER_FILE = 20
FILES_PER_BATCH = 2
KEYS = 7
TABLE = "CREATE TABLE {} (k bigint PRIMARY KEY, hits counter, total counter)"


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
    session.execute(TABLE.format("hitcount"))
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


def _input(folder: Path) -> Path:
    folder.mkdir()
    for index in range(FILES):
        seqs = list(range(index * ROWS_PER_FILE, (index + 1) * ROWS_PER_FILE))
        pq.write_table(pa.table({"seq": seqs}), folder / f"{index:03d}.parquet")
    return folder


def _expected() -> tuple[Counter[int], Counter[int]]:
    hits: Counter[int] = Counter()
    total: Counter[int] = Counter()
    for seq in range(FILES * ROWS_PER_FILE):
        hits[seq % KEYS] += 1
        total[seq % KEYS] += seq
    return hits, total


def _run(
    harness: CrashHarness,
    session: Any,
    address: tuple[str, int],
    tmp_path: Path,
    table: str,
    kills: list[Any],
) -> Any:
    source = _input(tmp_path / "in")
    session.execute(TABLE.format(table))
    checkpoint = tmp_path / "ck"
    spelled = Spellings(checkpoint)
    host, port = address

    def args(run: int) -> list[object]:
        # Another partition count and spelling on every restart.
        batch = [str(FILES_PER_BATCH), "counter", str(1 + run % 3)]
        return [source, spelled(run), host, str(port), session.keyspace, table, *batch]

    result = harness.run(SINK_JOB, args, kills)
    (record,) = read_guarantee(str(checkpoint)).values()
    assert record["achieved"] == "at-least-once"
    return result


def test_counters_add_every_row_once_when_killed_outside_the_resend_windows(
    crash_harness: CrashHarness, session: Any, cluster_address: tuple[str, int], tmp_path: Path
) -> None:
    kills = [
        at_point("sink.after_write", batch=1, partition=0),
        at_point("driver.before_commit", batch=2),
        at_point("driver.mid_commit", batch=3),
        at_point("driver.after_commit", batch=4),
    ]
    result = _run(crash_harness, session, cluster_address, tmp_path, "exact", kills)
    assert result.kills == 4, result.summary()
    hits, total = _expected()
    rows = list(session.execute("SELECT k, hits, total FROM exact"))
    assert {r.k: r.hits for r in rows} == dict(hits)
    assert {r.k: r.total for r in rows} == dict(total)


def test_a_kill_inside_a_resend_window_adds_one_segment_twice(
    crash_harness: CrashHarness, session: Any, cluster_address: tuple[str, int], tmp_path: Path
) -> None:
    """The documented at-least-once window: killed after a segment was sent, before it was
    recorded, the restart sends it again. Nothing is lost, and no more than that segment
    (at most one batch's rows) is added twice."""
    kills = [at_point(AFTER_SEND, batch=1, partition=0)]
    result = _run(crash_harness, session, cluster_address, tmp_path, "window", kills)
    assert result.fired == [f"{AFTER_SEND}@1:0"], result.summary()
    hits, total = _expected()
    rows = list(session.execute("SELECT k, hits, total FROM window"))
    extra = {r.k: r.hits - hits[r.k] for r in rows}
    assert len(rows) == KEYS
    assert all(n >= 0 for n in extra.values()), f"increments lost: {extra}"
    assert 0 < sum(extra.values()) <= FILES_PER_BATCH * ROWS_PER_FILE, extra
    assert all(r.total >= total[r.k] for r in rows)
