"""An idempotent sink: each task's rows go to one file named by (batch, partition).

Per task of batch N, partition p: write ``batch-<N>-part-<p>.jsonl`` through
:func:`firesteel.core.durable.write_atomically`, so the file is whole or absent,
and a re-run of the task replaces it with the same rows. The driver's commit
deletes files of batch N whose partition number no vote has: an earlier
attempt of N ran with more partitions, and its rows are in this attempt's
files now. Between a re-run's writes and that commit a reader may see both
(the temporary inconsistency every idempotent sink has while a batch replays).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
from pyarrow import fs

from firesteel.core.spi import IdempotentSink, TaskScope, Vote
from firesteel.core.toolkit import write_atomically

logger = logging.getLogger(__name__)


def file_name(batch_id: int, partition: int) -> str:
    """The file of one task's rows."""
    return f"batch-{batch_id}-part-{partition}.jsonl"


class TemplateSink(IdempotentSink):
    """Writes JSON lines per (batch, partition); see the module docs."""

    name: ClassVar[str] = "firesteel.template"

    def __init__(self, path: str, sink_id: str) -> None:
        self.path = Path(path)
        self.sink_id = sink_id

    def prepare(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    def write(self, scope: TaskScope, batches: Iterator[pa.RecordBatch]) -> int:
        lines = [json.dumps(row, default=str) for batch in batches for row in batch.to_pylist()]
        target = str(self.path / file_name(scope.batch_id, scope.partition_id))
        write_atomically(fs.LocalFileSystem(), target, "".join(f"{x}\n" for x in lines).encode())
        return len(lines)

    def commit_batch(self, batch_id: int, votes: Sequence[Vote]) -> None:
        voted = {file_name(batch_id, vote.partition_id) for vote in votes}
        for stale in self.path.glob(f"batch-{batch_id}-part-*.jsonl"):
            if stale.name not in voted:
                logger.info("firesteel.template: dropping %s of an earlier attempt", stale)
                stale.unlink(missing_ok=True)
        super().commit_batch(batch_id, votes)
