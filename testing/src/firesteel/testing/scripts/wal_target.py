"""Concrete write-ahead-log sinks for tests, with real targets on local disk.

* :class:`JsonLinesWalSink` appends every record to a JSON-lines file: a plain
  (appending) target, so a re-sent segment duplicates: at-least-once.
* :class:`SqliteUpsertWalSink` upserts records by their ``seq`` column into a
  SQLite table: a re-sent segment overwrites: exactly-once. In the same
  transaction it appends one row per record to the table ``writes`` (read with
  :func:`read_writes`), so a re-send the upserts absorb still shows.

Both record every send in ``<target>.sends`` (one JSON line per
``send_values`` call) so tests can tell which segments were sent how often.
"""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from firesteel.core.storage import StorageConfig
from firesteel.sinks.committers import CheckpointCommitter
from firesteel.sinks.write_ahead import WriteAheadSink

WRITER = uuid.uuid4().hex
"""This process's name in the ``writes`` table: a restarted job writes under another."""


def _log_send(target: str, batch_id: int, partition: int, rows: int) -> None:
    with open(f"{target}.sends", "a") as out:
        out.write(json.dumps({"batch": batch_id, "partition": partition, "rows": rows}) + "\n")
        out.flush()
        os.fsync(out.fileno())


class _TargetWalSink(WriteAheadSink):
    """A write-ahead-log sink that sends to the local file ``target``."""

    def __init__(
        self,
        sink_id: str,
        log_dir: str,
        committer: CheckpointCommitter,
        target: str,
        storage_options: StorageConfig | Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(sink_id, log_dir, committer, storage_options=storage_options)
        self.target = target


class JsonLinesWalSink(_TargetWalSink):
    """Appends each sent record as one JSON line to ``target``, tagged with its segment.

    Each line carries ``_batch`` and ``_partition``: the segment it was sent from.
    """

    name = "test.jsonl-wal"

    def send_values(self, batches: Iterable[pa.RecordBatch], batch_id: int, partition: int) -> None:
        rows = 0
        with open(self.target, "a") as out:
            for batch in batches:
                for record in batch.to_pylist():
                    sent = {**record, "_batch": batch_id, "_partition": partition}
                    out.write(json.dumps(sent) + "\n")
                    rows += 1
            out.flush()
            os.fsync(out.fileno())
        _log_send(self.target, batch_id, partition, rows)


class SqliteUpsertWalSink(_TargetWalSink):
    """Upserts each sent record into table ``records`` of the SQLite file ``target``, by ``seq``."""

    name = "test.sqlite-upsert-wal"
    upsert_target = True

    def send_values(self, batches: Iterable[pa.RecordBatch], batch_id: int, partition: int) -> None:
        rows = [
            (record["seq"], json.dumps(record)) for batch in batches for record in batch.to_pylist()
        ]
        writes = [(seq, batch_id, partition, WRITER) for seq, _ in rows]
        with sqlite3.connect(self.target) as db:
            db.execute("CREATE TABLE IF NOT EXISTS records (seq INTEGER PRIMARY KEY, body TEXT)")
            db.execute(
                "CREATE TABLE IF NOT EXISTS writes (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                "seq INTEGER, batch INTEGER, partition INTEGER, writer TEXT)"
            )
            db.executemany("INSERT OR REPLACE INTO records VALUES (?, ?)", rows)
            db.executemany(
                "INSERT INTO writes (seq, batch, partition, writer) VALUES (?, ?, ?, ?)", writes
            )
        _log_send(self.target, batch_id, partition, len(rows))


def read_jsonl(target: str) -> list[dict[str, object]]:
    """Every record in a JSON-lines target (duplicates included)."""
    if not os.path.exists(target):
        return []
    with open(target) as lines:
        return [json.loads(line) for line in lines if line.strip()]


def read_sqlite(target: str) -> list[int]:
    """The ``seq`` of every record in a SQLite upsert target."""
    with sqlite3.connect(target) as db:
        return [row[0] for row in db.execute("SELECT seq FROM records")]


def read_sqlite_bodies(target: str) -> dict[int, dict[str, object]]:
    """``seq`` -> the record stored for it in a SQLite upsert target."""
    with sqlite3.connect(target) as db:
        return {row[0]: json.loads(row[1]) for row in db.execute("SELECT seq, body FROM records")}


def read_sends(target: str) -> list[dict[str, int]]:
    """One entry per ``send_values`` call, in order."""
    if not os.path.exists(f"{target}.sends"):
        return []
    with open(f"{target}.sends") as lines:
        return [json.loads(line) for line in lines if line.strip()]


@dataclass(frozen=True)
class Write:
    """One record written into a SQLite upsert target: from which segment, by which process."""

    seq: int
    batch: int
    partition: int
    writer: str
    """:data:`WRITER` of the process that sent it."""


def read_writes(target: str) -> list[Write]:
    """Every record ever written into a SQLite upsert target, in write order."""
    with sqlite3.connect(target) as db:
        rows = db.execute("SELECT seq, batch, partition, writer FROM writes ORDER BY id")
        return [Write(*row) for row in rows]


@dataclass(frozen=True)
class Resends:
    """What a write-ahead-log sink's re-sends into an upsert target were, judged by its
    contract: only a segment sent and not yet recorded when its process died is sent
    again, by a later process, and a re-run sends a record in its batch's planned segment.
    """

    segments: frozenset[tuple[int, int]]
    """``(batch, partition)`` of the segments written by more than one process."""
    within_a_process: int
    """Records written again by the process that had written them: a recorded segment
    sent again (0 under the contract)."""
    across_segments: int
    """Records written from more than one segment: a batch sent under two plans (0)."""

    def beyond(self, crashes: int) -> int:
        """Everything the contract forbids when ``crashes`` processes died: re-sends within a
        process or across segments, and more re-sent segments than crashes (a process sends
        one segment at a time, so each death leaves at most one sent and unrecorded)."""
        extra = max(0, len(self.segments) - crashes)
        return self.within_a_process + self.across_segments + extra


def resends(writes: Sequence[Write]) -> Resends:
    """The re-sends among ``writes`` (:func:`read_writes`)."""
    per_process = Counter((write.seq, write.writer) for write in writes)
    segments: defaultdict[int, set[tuple[int, int]]] = defaultdict(set)
    writers: defaultdict[tuple[int, int], set[str]] = defaultdict(set)
    for write in writes:
        segments[write.seq].add((write.batch, write.partition))
        writers[(write.batch, write.partition)].add(write.writer)
    return Resends(
        segments=frozenset(segment for segment, names in writers.items() if len(names) > 1),
        within_a_process=sum(times - 1 for times in per_process.values()),
        across_segments=sum(1 for found in segments.values() if len(found) > 1),
    )
