"""The ceiling of Spark's Python Data Source API: a Parquet source and sink with no protocol.

Issue 12 measures firesteel's file source and sink against what the API itself
costs: ``bench.bare`` reads and writes Parquet the way a user's hand-written
Python data source would, with none of firesteel's work (no discovered-file log,
no guarantee check, no pending files, manifests, renames or fsyncs), so it
gives no guarantee at all and exists only to be timed.

- Reader: every ``*.parquet`` file of ``path`` is listed once; the offset is the
  number of files; one partition per file, read with ``ParquetFile.iter_batches``
  (64k rows per batch, as firesteel's source reads).
- Writer (Arrow): each task writes the batches it is handed into one Parquet file
  named by batch and partition, with ``ParquetWriter.write_batch``; the driver's
  commit does nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import cloudpickle
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

# Spark's Python workers cannot import this module by name (benchmarks/ is not installed).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

NAME = "bench.bare"
READ_BATCH_ROWS = 65536


def _files(path: str) -> list[str]:
    return sorted(str(found) for found in Path(path).glob("*.parquet"))


class _Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, path: str) -> None:
        self.path = path

    def initialOffset(self) -> dict[str, Any]:
        return {"files": 0}

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        return {"files": len(_files(self.path))}

    def prepareForTriggerAvailableNow(self) -> None:
        """Nothing to pin: the benchmark's input does not change while it runs."""

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return [InputPartition(path) for path in _files(self.path)[start["files"] : end["files"]]]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        parquet = pq.ParquetFile(partition.value)
        yield from parquet.iter_batches(batch_size=READ_BATCH_ROWS)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to acknowledge."""


class _Done(WriterCommitMessage):
    pass


class _Writer(DataSourceStreamArrowWriter):
    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        batch_id = context.getLocalProperty("streaming.sql.batchId") if context else "0"
        partition = context.partitionId() if context else 0
        writer: pq.ParquetWriter | None = None
        for batch in iterator:
            if writer is None:
                target = Path(self.path) / f"part-{batch_id}-{partition:05d}.parquet"
                writer = pq.ParquetWriter(target, batch.schema)
            writer.write_batch(batch)
        if writer is not None:
            writer.close()
        return _Done()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to make visible: the tasks' files are already in place."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo (a bare sink gives no guarantee)."""


class BareParquet(DataSource):
    """``bench.bare``: option ``path`` is the folder read from or written into."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return from_arrow_schema(pq.read_schema(_files(self.options["path"])[0]))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _Reader(self.options["path"])

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        Path(self.options["path"]).mkdir(parents=True, exist_ok=True)
        return _Writer(self.options["path"])


def register(session: SparkSession) -> None:
    """Make ``format("bench.bare")`` available in ``session``."""
    session.dataSource.register(BareParquet)
