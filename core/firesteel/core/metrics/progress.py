"""Spark's query progress with firesteel's record of the same batch beside it.

Spark builds ``query.lastProgress`` in the JVM, and a Python data source has no way
into it: Spark's Python stream reader and writer implement neither
``ReportsSourceMetrics`` nor ``ReportsSinkMetrics`` (their only metrics are the Python
worker's own, in the SQL tab), and the progress a ``StreamingQueryListener`` receives
is a copy that cannot be changed. So firesteel hands out Spark's progress merged with
its own: :func:`last_progress` is ``query.lastProgress`` as a dict plus a
``"firesteel"`` key holding, for the same ``batchId``, every firesteel sink's batch
record (:class:`~firesteel.core.metrics.history.BatchRecord`) and every source's progress
record (:mod:`firesteel.core.metrics.sources`); :class:`ProgressListener` passes every
progress of every query of a session, merged the same way, to a function of the user's.

:func:`last_progress` reads the records when called and costs nothing otherwise. The
listener is opt-in (:func:`watch_progress`): it makes Spark call into the driver's
Python process for every batch of every query and read the records from checkpoint
storage each time (requests, on an object store), a cost only a job that uses the
merged progress should pay. Sink figures count committed work; the records say which of
their figures count attempts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from firesteel.core.errors import ConfigError
from firesteel.core.metrics.history import batch_records
from firesteel.core.metrics.sources import read_source_progress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.streaming.listener import (
        QueryIdleEvent,
        QueryProgressEvent,
        QueryStartedEvent,
        QueryTerminatedEvent,
    )

__all__ = ["FIRESTEEL_KEY", "ProgressListener", "last_progress", "merged", "watch_progress"]

logger = logging.getLogger(__name__)

FIRESTEEL_KEY = "firesteel"
"""The key of firesteel's part in a merged progress."""


def merged(progress: dict[str, Any], checkpoint: str) -> dict[str, Any]:
    """``progress`` (Spark's, as a dict) with firesteel's records of its ``batchId`` read
    from ``checkpoint``: ``{"firesteel": {"sinks": {sink id: record}, "sources": {...}}}``.

    A sink has no record of a batch Spark did not hand it (a batch that failed, or
    one of a query without firesteel sinks): it is then absent.
    """
    batch = int(progress["batchId"])
    records = batch_records(checkpoint, batch)
    firesteel = {
        "checkpoint": checkpoint,
        "sinks": {sink: asdict(record) for sink, record in records.items()},
        "sources": read_source_progress(checkpoint),
    }
    return {**progress, FIRESTEEL_KEY: firesteel}


def checkpoint_of(query: StreamingQuery) -> str:
    """The checkpoint location Spark resolved for a running or stopped ``query``.

    Only a classic session can tell (Spark Connect hides the query's JVM object):
    there, pass the location to :func:`last_progress` yourself.
    """
    try:
        return str(query._jsq.streamingQuery().resolvedCheckpointRoot())
    except AttributeError as exc:
        msg = (
            f"query {query.id}: its checkpoint location cannot be read from this session "
            "(Spark Connect); pass checkpoint=<the query's checkpointLocation>"
        )
        raise ConfigError(msg) from exc


def last_progress(query: StreamingQuery, checkpoint: str | None = None) -> dict[str, Any] | None:
    """``query.lastProgress`` as a dict with firesteel's records of that batch under
    ``"firesteel"`` (see :func:`merged`); ``None`` before the query's first batch."""
    progress = query.lastProgress
    if progress is None:
        return None
    return merged(json.loads(progress.json), checkpoint or checkpoint_of(query))


class ProgressListener(StreamingQueryListener):
    """Hands ``on_progress`` every query progress of a session, merged with firesteel's
    records (:func:`merged`). Spark calls it after the batch committed, so the records
    are there. A failing ``on_progress`` is logged, never raised into Spark's listener bus.
    """

    def __init__(self, spark: SparkSession, on_progress: Callable[[dict[str, Any]], None]) -> None:
        self.session = spark
        self.on_progress = on_progress
        self.checkpoints: dict[str, str] = {}

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        # Spark calls this while start() waits, so the query is active and can tell its
        # checkpoint; by a late progress event of a short query it may be gone.
        self._checkpoint(str(event.id))

    def _checkpoint(self, query_id: str) -> str | None:
        checkpoint = self.checkpoints.get(query_id)
        if checkpoint is None:
            query = self.session.streams.get(query_id)
            if query is not None:
                checkpoint = self.checkpoints[query_id] = checkpoint_of(query)
        return checkpoint

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        progress = event.progress
        query_id = str(progress.id)
        try:
            checkpoint = self._checkpoint(query_id)
            if checkpoint is None:
                logger.warning("firesteel: progress of query %s, which is gone", query_id)
                return
            self.on_progress(merged(json.loads(progress.json), checkpoint))
        except Exception:
            logger.exception("firesteel: progress of query %s batch %d", query_id, progress.batchId)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        """Nothing: an idle query has no new batch."""

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        # Its progress events all came before this one (the bus keeps their order).
        self.checkpoints.pop(str(event.id), None)


def watch_progress(
    spark: SparkSession, on_progress: Callable[[dict[str, Any]], None]
) -> ProgressListener:
    """Add a :class:`ProgressListener` calling ``on_progress`` to ``spark``; remove it with
    ``spark.streams.removeListener(listener)``."""
    listener = ProgressListener(spark, on_progress)
    spark.streams.addListener(listener)
    return listener
