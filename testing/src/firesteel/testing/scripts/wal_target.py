"""Concrete write-ahead-log sinks for tests, with real targets on local disk.

* :class:`JsonLinesWalSink` appends every record to a JSON-lines file: a plain
  (appending) target, so a re-sent segment duplicates: at-least-once.
* :class:`SqliteUpsertWalSink` upserts records by their ``seq`` column into a
  SQLite table: a re-sent segment overwrites: exactly-once.

Both record every send in ``<target>.sends`` (one JSON line per
``send_values`` call) so tests can tell which segments were sent how often.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable, Mapping

import pyarrow as pa

from firesteel.core.storage import StorageConfig
from firesteel.sinks.committers import CheckpointCommitter
from firesteel.sinks.write_ahead import WriteAheadSink


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
        with sqlite3.connect(self.target) as db:
            db.execute("CREATE TABLE IF NOT EXISTS records (seq INTEGER PRIMARY KEY, body TEXT)")
            db.executemany("INSERT OR REPLACE INTO records VALUES (?, ?)", rows)
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
