"""The per-batch record of a sink's committed work, kept beside Spark's checkpoint.

After a sink committed batch N, and before Spark writes ``commits/N``, the driver
writes ``<checkpoint>/firesteel/metrics/<sink id>/<N>.json``: when the batch
committed, how many tasks voted, the rows and Arrow bytes they were handed, the
slowest task's write time, the commit's time, every counter the tasks added, and
the running totals through batch N (those of batch N - 1 plus this batch's).

A crash before ``commits/N`` makes Spark commit batch N again, which writes the
record again from the same input, so the history holds every committed batch
once, and its totals count committed work only, however often a batch ran. The
last :data:`RETAINED` records are kept, as Spark keeps its own progress.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pyarrow import fs

from firesteel.core.checkpoint import FIRESTEEL_DIR, filesystem
from firesteel.core.durable import read_record, write_record
from firesteel.core.metrics.task import BYTES, ROWS, WRITE_SECONDS
from firesteel.core.sink import Vote

__all__ = ["RETAINED", "BatchRecord", "batch_record", "read_history", "record_batch"]

logger = logging.getLogger(__name__)

KIND = "firesteel-batch-metrics"
VERSION = 1
RETAINED = 100
"""Batch records kept per sink; older ones are deleted as new ones are written."""
METRICS_DIR = "metrics"


@dataclass(frozen=True)
class BatchRecord:
    """One committed batch of one sink (see the module docs)."""

    sink_id: str
    batch: int
    committed_at: float
    """Seconds since the epoch when the sink's commit returned."""
    tasks: int
    input_rows: int
    input_bytes: int
    write_seconds: float
    """The slowest task's time in the sink's write (the batch waits for it)."""
    commit_seconds: float
    counters: dict[str, float] = field(default_factory=dict)
    """Every counter the batch's tasks added, summed."""
    totals: dict[str, float] = field(default_factory=dict)
    """``input_rows``, ``input_bytes``, ``batches`` and every counter, through this batch."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BatchRecord:
        return cls(**data)


def _folder(checkpoint: str, sink_id: str) -> str:
    return f"{checkpoint.rstrip('/')}/{FIRESTEEL_DIR}/{METRICS_DIR}/{sink_id}"


def batch_record(checkpoint: str, sink_id: str, batch: int) -> BatchRecord | None:
    """The record of ``batch``, or ``None`` when there is none."""
    try:
        content = read_record(f"{_folder(checkpoint, sink_id)}/{batch}.json", KIND, (VERSION,))
    except FileNotFoundError:
        return None
    return BatchRecord.from_json(content)


def _summed(votes: Sequence[Vote]) -> dict[str, float]:
    summed: dict[str, float] = {}
    for vote in votes:
        for name, value in vote.metrics.items():
            if name != WRITE_SECONDS:
                summed[name] = summed.get(name, 0) + value
    return summed


def record_batch(
    checkpoint: str, sink_id: str, batch: int, votes: Sequence[Vote], commit_seconds: float
) -> BatchRecord:
    """Write the record of committed ``batch`` (replacing one an earlier run wrote)."""
    summed = _summed(votes)
    counters = {k: v for k, v in summed.items() if k not in (ROWS, BYTES)}
    previous = batch_record(checkpoint, sink_id, batch - 1) if batch > 0 else None
    totals = dict(previous.totals) if previous is not None else {}
    for name, value in {**summed, "batches": 1}.items():
        totals[name] = totals.get(name, 0) + value
    record = BatchRecord(
        sink_id=sink_id,
        batch=batch,
        committed_at=time.time(),
        tasks=len(votes),
        input_rows=int(summed.get(ROWS, 0)),
        input_bytes=int(summed.get(BYTES, 0)),
        write_seconds=max((v.metrics.get(WRITE_SECONDS, 0.0) for v in votes), default=0.0),
        commit_seconds=commit_seconds,
        counters=counters,
        totals=totals,
    )
    folder = _folder(checkpoint, sink_id)
    write_record(f"{folder}/{batch}.json", KIND, VERSION, asdict(record))
    _forget_before(folder, batch - RETAINED + 1)
    return record


def _batches(fsys: fs.FileSystem, folder: str) -> list[int]:
    infos = fsys.get_file_info(fs.FileSelector(folder, allow_not_found=True))
    names = (info.base_name.removesuffix(".json") for info in infos)
    return sorted(int(name) for name in names if name.isdigit())


def _forget_before(folder: str, oldest_kept: int) -> None:
    fsys, path = filesystem(folder)
    stale = f"{path}/{oldest_kept - 1}.json"
    # Only the one record that just fell out of the window: no listing per batch.
    if oldest_kept > 0 and fsys.get_file_info(stale).type == fs.FileType.File:
        fsys.delete_file(stale)


def read_history(checkpoint: str, last: int = RETAINED) -> dict[str, list[BatchRecord]]:
    """The last ``last`` batch records of every firesteel sink of a query, by sink id,
    oldest first."""
    fsys, base = filesystem(f"{checkpoint.rstrip('/')}/{FIRESTEEL_DIR}/{METRICS_DIR}")
    sinks = fsys.get_file_info(fs.FileSelector(base, allow_not_found=True))
    history = {}
    for sink in sorted(sinks, key=lambda info: info.base_name):
        if sink.type != fs.FileType.Directory:
            continue
        batches = _batches(fsys, sink.path)[-last:]
        records = [batch_record(checkpoint, sink.base_name, batch) for batch in batches]
        history[sink.base_name] = [r for r in records if r is not None]
    return history
