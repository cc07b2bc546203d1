"""The write-ahead-log sink and the file checkpoint committer, driven directly (no Spark).

The sink's two halves run here in one process, exactly as Spark would call
them: ``write_partition`` per task, then ``commit_batch`` on the driver.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pyarrow as pa
import pytest

from firesteel.core.context import TaskScope
from firesteel.core.durable import read_record, write_record
from firesteel.core.errors import (
    CheckpointCorruptError,
    GuaranteeError,
    IncompatibleFormatError,
    SinkError,
)
from firesteel.core.guarantee import Guarantee, Part, Replay, SinkKind, check
from firesteel.core.sink import Vote
from firesteel.sinks.committers import FileCheckpointCommitter
from firesteel.sinks.write_ahead import (
    PLAN_FORMAT_VERSION,
    PLAN_KIND,
    SegmentCommittable,
    WriteAheadSink,
)
from firesteel.testing.scripts.wal_target import (
    JsonLinesWalSink,
    Resends,
    SqliteUpsertWalSink,
    Write,
    read_jsonl,
    read_sends,
    read_sqlite,
    read_writes,
    resends,
)


def _sink(tmp_path: Path, sink_id: str = "s1") -> JsonLinesWalSink:
    sink = JsonLinesWalSink(
        sink_id,
        str(tmp_path / "ck" / "firesteel" / "wal"),
        FileCheckpointCommitter(str(tmp_path / "ck" / "firesteel" / "wal-commits")),
        str(tmp_path / "target.jsonl"),
    )
    sink.prepare()
    return sink


def _records(start: int, stop: int) -> list[pa.RecordBatch]:
    seqs = list(range(start, stop))
    middle = (start + stop) // 2
    table = pa.table({"seq": seqs, "text": [f"r{i}" for i in seqs]})
    return table.slice(0, middle - start).to_batches() + table.slice(middle - start).to_batches()


def _write(sink: WriteAheadSink, batch: int, partition: int, start: int, stop: int, attempt=0):
    scope = TaskScope("q", batch, partition, attempt)
    return sink.write_partition(scope, iter(_records(start, stop)))


def _segment(vote: Vote) -> str | None:
    return vote.committable(SegmentCommittable).segment


def _seqs(tmp_path: Path) -> list[int]:
    return [int(r["seq"]) for r in read_jsonl(str(tmp_path / "target.jsonl"))]


def test_commit_sends_every_segment_in_partition_order_then_deletes_them(tmp_path: Path) -> None:
    sink = _sink(tmp_path)
    votes = [_write(sink, 0, 1, 10, 20), _write(sink, 0, 0, 0, 10)]
    assert [v.rows for v in votes] == [10, 10]
    assert Path(str(_segment(votes[0]))).exists()
    sink.commit_batch(0, votes)
    assert _seqs(tmp_path) == list(range(20))
    sends = read_sends(str(tmp_path / "target.jsonl"))
    assert [(s["partition"], s["rows"]) for s in sends] == [(0, 10), (1, 10)]
    assert not Path(str(_segment(votes[0]))).exists()
    assert not (tmp_path / "ck" / "firesteel" / "wal" / "s1" / "0").exists()


def test_commit_twice_sends_once(tmp_path: Path) -> None:
    sink = _sink(tmp_path)
    votes = [_write(sink, 0, 0, 0, 5), _write(sink, 0, 1, 5, 9)]
    sink.commit_batch(0, votes)
    # A crash before commits/0 re-runs batch 0: new segments, same keys.
    rerun = [_write(sink, 0, 0, 0, 5), _write(sink, 0, 1, 5, 9)]
    sink.commit_batch(0, rerun)
    assert _seqs(tmp_path) == list(range(9))
    assert len(read_sends(str(tmp_path / "target.jsonl"))) == 2


def test_write_stamp_is_fixed_by_the_first_commit_and_survives_a_restart(tmp_path: Path) -> None:
    sink = _sink(tmp_path)
    with pytest.raises(SinkError, match="batch 0 has no plan"):
        sink.write_stamp(0)
    sink.commit_batch(0, [_write(sink, 0, 0, 0, 5)])
    first = sink.write_stamp(0)
    restarted = _sink(tmp_path)
    restarted.commit_batch(0, [_write(restarted, 0, 0, 0, 5)])
    assert restarted.write_stamp(0) == first


def test_write_stamp_increases_when_the_clock_is_set_back(tmp_path: Path) -> None:
    sink = _sink(tmp_path)
    sink.commit_batch(4, [_write(sink, 4, 0, 0, 5)])
    plan = Path(sink.plan_path(4))
    ahead = time.time_ns() // 1000 + 3600 * 10**6
    # Batch 4 ran while the clock was an hour ahead; it is now set right.
    recorded = read_record(plan, PLAN_KIND, (PLAN_FORMAT_VERSION,))
    write_record(plan, PLAN_KIND, PLAN_FORMAT_VERSION, {**recorded, "stamp": ahead})
    restarted = _sink(tmp_path)
    restarted.commit_batch(5, [_write(restarted, 5, 0, 5, 9)])
    assert restarted.write_stamp(5) == ahead + 1


def test_recorded_segments_are_skipped_after_a_partial_commit(tmp_path: Path) -> None:
    sink = _sink(tmp_path)
    votes = [_write(sink, 3, 0, 0, 4), _write(sink, 3, 1, 4, 8), _write(sink, 3, 2, 8, 12)]
    # As if a crash hit after partitions 0 and 1 were sent and recorded.
    sink.send_values(sink.read_segment(votes[0]), 3, 0)
    sink.committer.commit("s1", 3, 0)
    sink.send_values(sink.read_segment(votes[1]), 3, 1)
    sink.committer.commit("s1", 3, 1)
    rerun = [_write(sink, 3, p, 4 * p, 4 * p + 4, attempt=0) for p in range(3)]
    sink.commit_batch(3, rerun)
    assert _seqs(tmp_path) == list(range(12))
    assert [s["partition"] for s in read_sends(str(tmp_path / "target.jsonl"))] == [0, 1, 2]


def test_an_upsert_targets_log_of_writes_shows_what_its_table_absorbs(tmp_path: Path) -> None:
    target = str(tmp_path / "target.sqlite")
    sink = SqliteUpsertWalSink(
        "s1",
        str(tmp_path / "ck" / "wal"),
        FileCheckpointCommitter(str(tmp_path / "ck" / "wal-commits")),
        target,
    )
    sink.prepare()
    sink.commit_batch(0, [_write(sink, 0, 0, 0, 5), _write(sink, 0, 1, 5, 9)])
    sink.commit_batch(0, [_write(sink, 0, 0, 0, 5), _write(sink, 0, 1, 5, 9)])  # recorded
    assert resends(read_writes(target)) == Resends(frozenset(), 0, 0)
    # A segment sent twice by one process (as a sink losing its records would): the table
    # still holds each record once; the log of writes does not.
    vote = _write(sink, 1, 0, 9, 13)
    sink.send_values(sink.read_segment(vote), 1, 0)
    sink.send_values(sink.read_segment(vote), 1, 0)
    assert sorted(read_sqlite(target)) == list(range(13))
    assert resends(read_writes(target)) == Resends(frozenset(), 4, 0)


def test_resends_allow_one_resent_segment_per_crash_and_nothing_else() -> None:
    window = [Write(0, 1, 0, "first"), Write(1, 1, 0, "first"), Write(0, 1, 0, "second")]
    assert resends(window) == Resends(frozenset({(1, 0)}), 0, 0)
    assert resends(window).beyond(1) == 0 and resends(window).beyond(0) == 1
    replanned = [Write(0, 1, 0, "first"), Write(0, 1, 2, "second")]
    assert resends(replanned).across_segments == 1 and resends(replanned).beyond(1) == 1


def test_task_retries_never_replace_each_others_segments(tmp_path: Path) -> None:
    sink = _sink(tmp_path)
    first = _write(sink, 0, 0, 0, 6, attempt=0)
    retry = _write(sink, 0, 0, 0, 6, attempt=1)
    assert _segment(first) != _segment(retry)
    assert Path(str(_segment(first))).exists() and Path(str(_segment(retry))).exists()
    sink.commit_batch(0, [retry])
    assert _seqs(tmp_path) == list(range(6))
    assert not (tmp_path / "ck" / "firesteel" / "wal" / "s1" / "0").exists()


@pytest.mark.parametrize(("first", "rerun"), [(4, 2), (2, 4), (3, 1)])
def test_rerun_with_another_partition_count_neither_loses_nor_resends(
    tmp_path: Path, first: int, rerun: int
) -> None:
    sink = _sink(tmp_path)

    def votes(count: int) -> list[Vote]:
        # 12 rows split into `count` partitions: other counts put rows elsewhere.
        size = 12 // count
        return [_write(sink, 5, p, p * size, (p + 1) * size) for p in range(count)]

    planned = votes(first)
    # The first commit crashes after sending and recording half of its partitions.
    original = sink.committer.commit
    calls = []

    def crash_after_half(sink_id: str, batch_id: int, partition_id: int) -> None:
        original(sink_id, batch_id, partition_id)
        calls.append(partition_id)
        if len(calls) == first // 2 or first == 1:
            raise RuntimeError("driver killed")

    sink.committer.commit = crash_after_half  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="driver killed"):
        sink.commit_batch(5, planned)
    sink.committer.commit = original  # type: ignore[method-assign]
    # Batch 5 re-runs with another partition count and commits.
    sink.commit_batch(5, votes(rerun))
    assert sorted(_seqs(tmp_path)) == list(range(12))
    assert len(_seqs(tmp_path)) == 12, "no row sent twice"


def test_committing_a_batch_deletes_leftover_segments_of_older_batches(tmp_path: Path) -> None:
    sink = _sink(tmp_path)
    stale = _write(sink, 1, 0, 0, 3)
    votes = [_write(sink, 2, 0, 3, 6)]
    sink.commit_batch(2, votes)
    assert not Path(str(_segment(stale))).exists()
    assert _seqs(tmp_path) == [3, 4, 5]


def test_empty_partition_votes_without_a_segment(tmp_path: Path) -> None:
    sink = _sink(tmp_path)
    empty = sink.write_partition(TaskScope("q", 0, 0, 0), iter([]))
    assert empty.rows == 0
    assert _segment(empty) is None
    sink.commit_batch(0, [empty, _write(sink, 0, 1, 0, 2)])
    assert _seqs(tmp_path) == [0, 1]


def test_corrupt_segment_is_refused_naming_the_file(tmp_path: Path) -> None:
    sink = _sink(tmp_path)
    vote = _write(sink, 0, 0, 0, 50)
    segment = Path(str(_segment(vote)))
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF
    segment.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorruptError, match=rf"{segment}: .*checksum mismatch"):
        sink.commit_batch(0, [vote])
    assert _seqs(tmp_path) == []
    assert not sink.committer.is_committed("s1", 0, 0)


def test_missing_segment_is_refused_naming_the_file(tmp_path: Path) -> None:
    sink = _sink(tmp_path)
    vote = _write(sink, 0, 0, 0, 5)
    Path(str(_segment(vote))).unlink()
    with pytest.raises(CheckpointCorruptError, match=r"part-00000-\w+\.arrow: .*missing"):
        sink.commit_batch(0, [vote])


def test_newer_segment_format_is_refused(tmp_path: Path) -> None:
    sink = _sink(tmp_path)
    vote = _write(sink, 0, 0, 0, 5)
    payload = vote.committable(SegmentCommittable)
    newer = Vote(**{**vote.__dict__, "payload": dataclasses.replace(payload, version=99)})
    with pytest.raises(IncompatibleFormatError, match="upgrade firesteel"):
        sink.commit_batch(0, [newer])


def test_upsert_target_overwrites_a_resent_segment(tmp_path: Path) -> None:
    target = str(tmp_path / "target.db")
    sink = SqliteUpsertWalSink(
        "u1",
        str(tmp_path / "wal"),
        FileCheckpointCommitter(str(tmp_path / "commits")),
        target,
    )
    sink.prepare()
    vote = _write(sink, 0, 0, 0, 8)
    # The send happened but the crash came before the committer recorded it.
    sink.send_values(sink.read_segment(vote), 0, 0)
    sink.commit_batch(0, [_write(sink, 0, 0, 0, 8)])
    assert len(read_sends(target)) == 2
    assert sorted(read_sqlite(target)) == list(range(8))


def test_sink_kind_follows_the_target() -> None:
    assert JsonLinesWalSink.kind is SinkKind.WRITE_AHEAD_LOG
    assert SqliteUpsertWalSink.kind is SinkKind.WRITE_AHEAD_LOG_UPSERT


def test_guarantee_table_for_write_ahead_log_sinks() -> None:
    source = Part("source #0 (firesteel.files)", replay=Replay.RESETTABLE)
    plain = Part("sink test.jsonl-wal", sink_kind=JsonLinesWalSink.kind)
    upsert = Part("sink test.sqlite-upsert-wal", sink_kind=SqliteUpsertWalSink.kind)
    assert check([source], plain, Guarantee.AT_LEAST_ONCE) is Guarantee.AT_LEAST_ONCE
    with pytest.raises(GuaranteeError, match="write-ahead-log sink, which gives at-least-once"):
        check([source], plain, Guarantee.EXACTLY_ONCE)
    assert check([source], upsert, Guarantee.EXACTLY_ONCE) is Guarantee.EXACTLY_ONCE


def test_file_committer_is_idempotent_and_forgets_old_batches(tmp_path: Path) -> None:
    committer = FileCheckpointCommitter(f"file://{tmp_path}/commits")
    committer.open()
    assert not committer.is_committed("s", 4, 1)
    committer.commit("s", 4, 1)
    committer.commit("s", 4, 1)
    committer.commit("s", 5, 0)
    assert committer.is_committed("s", 4, 1)
    assert not committer.is_committed("s", 4, 0)
    assert not committer.is_committed("other", 4, 1)
    assert [p.name for p in (tmp_path / "commits" / "s" / "4").iterdir()] == ["1.committed"]
    committer.forget("s", 5)
    assert not committer.is_committed("s", 4, 1)
    assert committer.is_committed("s", 5, 0)


def test_sink_id_must_be_a_path_segment(tmp_path: Path) -> None:
    with pytest.raises(SinkError, match="must be non-empty"):
        _sink(tmp_path, sink_id="a/b")


def test_only_a_transactional_target_may_go_without_a_committer(tmp_path: Path) -> None:
    """A target that keeps no record of its own needs the committer's, or a crash after a
    send would send the segment again without anything noticing."""
    with pytest.raises(SinkError, match=r"needs a checkpoint committer"):
        JsonLinesWalSink("s1", str(tmp_path / "wal"), None, str(tmp_path / "target.jsonl"))
