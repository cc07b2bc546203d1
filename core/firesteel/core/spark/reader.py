"""A :class:`~firesteel.core.source.ResettableSource` as a Spark ``DataSourceStreamReader``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxBytes,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.streaming.datasource import ReadLimit as SparkReadLimit

from firesteel.core.context import TaskScope
from firesteel.core.faults import fault_point
from firesteel.core.logs import configure_worker_logging, timed
from firesteel.core.metrics.task import measured_read
from firesteel.core.source import UNBOUNDED, Offset, ReadLimit, ResettableSource
from firesteel.core.spark.offsets import SOURCE_TAG

AFTER_READ = fault_point(
    "source.after_read", "a task read its input partition, before the batch committed"
)

OFFSET_KEY = "offset"


class _Partition(InputPartition):
    def __init__(self, value: Any) -> None:
        super().__init__(value)


class SparkStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Adapts a resettable source; tags every offset with the source's identity.

    The tag (``{"firesteel": {"source": ..., "replay": ...}, "offset": ...}``)
    lands in Spark's ``offsets/N``, where sinks read it for the guarantee check.
    """

    def __init__(self, source: ResettableSource) -> None:
        configure_worker_logging()
        self.source = source

    def _wrap(self, offset: Offset) -> dict[str, Any]:
        tag = {"source": self.source.name, "replay": self.source.replay.value}
        return {SOURCE_TAG: tag, OFFSET_KEY: offset}

    @staticmethod
    def _unwrap(offset: dict[str, Any]) -> Offset:
        inner = offset.get(OFFSET_KEY, offset)
        return dict(inner) if isinstance(inner, dict) else {}

    def initialOffset(self) -> dict[str, Any]:
        return self._wrap(self.source.initial_offset())

    def getDefaultReadLimit(self) -> SparkReadLimit:
        limit = self.source.default_limit()
        if limit.max_files is not None:
            return ReadMaxFiles(limit.max_files)
        if limit.max_bytes is not None:
            return ReadMaxBytes(limit.max_bytes)
        if limit.max_records is not None:
            return ReadMaxRows(limit.max_records)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: SparkReadLimit) -> dict[str, Any]:
        # Spark hands over one limit type; the source applies all of its
        # configured limits together unless Spark asks for everything.
        ours: ReadLimit = (
            UNBOUNDED if isinstance(limit, ReadAllAvailable) else self.source.default_limit()
        )
        with timed("source.latest_offset"):
            return self._wrap(self.source.latest_offset(self._unwrap(start), ours))

    def reportLatestOffset(self) -> dict[str, Any] | None:
        with timed("source.report_latest_offset"):
            reported = self.source.report_latest_offset()
        return None if reported is None else self._wrap(reported)

    def prepareForTriggerAvailableNow(self) -> None:
        self.source.prepare_available_now()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        with timed("source.partitions"):
            planned = self.source.partitions(self._unwrap(start), self._unwrap(end))
        return [_Partition(value) for value in planned]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        configure_worker_logging()
        scope = TaskScope.running()
        with timed("source.read"):
            # The sink of this task adds the read to its vote: the batch's read phase.
            yield from measured_read(scope, self.source.name, self.source.read(partition.value))
        AFTER_READ.fire(scope.batch_id if scope else None, scope.partition_id if scope else None)

    def commit(self, end: dict[str, Any]) -> None:
        with timed("source.commit"):
            self.source.commit(self._unwrap(end))

    def stop(self) -> None:
        self.source.stop()
