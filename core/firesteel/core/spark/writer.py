"""A :class:`~firesteel.core.sink.Sink` as a Spark ``DataSourceStreamArrowWriter``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from firesteel.core.checkpoint import GuaranteeRecord, has_committed, write_guarantee
from firesteel.core.context import TaskScope
from firesteel.core.errors import ConfigError, SinkError
from firesteel.core.faults import committing
from firesteel.core.guarantee import Guarantee, Part, check
from firesteel.core.logs import configure_worker_logging, timed
from firesteel.core.metrics.commit import measured_commit
from firesteel.core.metrics.history import record_batch
from firesteel.core.metrics.task import measured_write
from firesteel.core.sink import Sink, Vote
from firesteel.core.spark.offsets import source_parts
from firesteel.core.storage import patient_checks

logger = logging.getLogger(__name__)


def check_guarantee(sink: Sink, checkpoint: str, required: Guarantee | None) -> Guarantee:
    """Run the guarantee check for ``sink`` against the sources in ``checkpoint``'s offsets log.

    Logs the result and records it under ``<checkpoint>/firesteel/``; raises
    :class:`~firesteel.core.errors.GuaranteeError` when ``required`` cannot be met.
    """
    sources = source_parts(checkpoint)
    sink_part = Part(f"sink {sink.name}", sink_kind=sink.kind)
    achieved = check(sources, sink_part, required)
    write_guarantee(
        checkpoint,
        sink.sink_id,
        GuaranteeRecord(sink.name, [s.name for s in sources], achieved, required),
    )
    logger.info(
        "firesteel: sink %s (%s) with sources [%s] runs %s",
        sink.name,
        sink.kind.value,
        ", ".join(s.name for s in sources),
        achieved.label,
    )
    return achieved


def commit_batch(
    sink: Sink, checkpoint: str, batch_id: int, votes: list[Vote], *, record: bool = True
) -> None:
    """Commit the batch, then record its metrics (before Spark writes ``commits/N``, so a
    crash in between makes Spark commit, and record, the batch again); ``record=False``
    (option ``metrics=false``) only commits."""
    if not record:
        with timed("sink.commit"), committing(checkpoint):
            sink.commit_batch(batch_id, votes)
        return
    with timed("sink.commit"), committing(checkpoint):
        metrics, seconds = measured_commit(sink, batch_id, votes)
    with timed("sink.metrics_record"):
        record_batch(checkpoint, sink.sink_id, batch_id, votes, seconds, commit=metrics)


class SparkStreamWriter(DataSourceStreamArrowWriter):
    """Runs a sink's executor half in ``write`` and its driver half in ``commit``/``abort``.

    Created on the driver once the first batch's offsets are logged, which is
    when the guarantee check can see the sources; a query that asks for more
    than its parts give fails here, before any task writes.
    """

    def __init__(self, sink: Sink, options: dict[str, Any], required: Guarantee | None) -> None:
        checkpoint = options.get("checkpointlocation")
        if not checkpoint:
            msg = (
                f"{sink.name}: a checkpoint location is required; set "
                ".option('checkpointLocation', <path>) on writeStream (Spark does not hand "
                "the session's spark.sql.streaming.checkpointLocation to Python sinks)"
            )
            raise ConfigError(msg)
        configure_worker_logging()
        self.sink = sink
        self.checkpoint = checkpoint
        # Validated by the connector's options (SinkOptions.metrics): true or false.
        self.metrics = str(options.get("metrics", "true")).strip().lower() == "true"
        with timed("writer.guarantee_check"):
            self.guarantee = check_guarantee(sink, checkpoint, required)
        # Spark builds the writer in a new Python process for every batch: a query that
        # committed before reached its store, and rides out an outage from here on too.
        with timed("writer.prepare"), patient_checks(has_committed(checkpoint)):
            sink.prepare()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        configure_worker_logging()
        with timed("sink.write"):
            if not self.metrics:
                return self.sink.write_partition(TaskScope.current(), iterator)
            return measured_write(self.sink, TaskScope.current(), iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        configure_worker_logging()
        votes = [m for m in messages if isinstance(m, Vote)]
        if len(votes) != len(messages):
            msg = f"{self.sink.name}: batch {batchId} has tasks without a vote; refusing to commit"
            raise SinkError(msg)
        commit_batch(self.sink, self.checkpoint, batchId, votes, record=self.metrics)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.sink.abort_batch(batchId, [m if isinstance(m, Vote) else None for m in messages])
