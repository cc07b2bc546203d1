"""Where a piece of work belongs: query, sink, batch (= checkpoint id), partition, attempt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from firesteel.core.errors import FiresteelError


@dataclass(frozen=True)
class TaskScope:
    """The identity of one write task; everything a task writes is keyed by it.

    ``attempt`` differs between retries of the same task, so it may name
    scratch files but must never decide what is committed: that is keyed by
    (sink, batch, partition) only.
    """

    query_id: str
    batch_id: int
    partition_id: int
    attempt: int

    @classmethod
    def running(cls) -> TaskScope | None:
        """The scope of the running streaming task; None outside a Spark task or micro-batch."""
        from pyspark import TaskContext

        context = TaskContext.get()
        raw_batch = context.getLocalProperty("streaming.sql.batchId") if context else None
        if context is None or raw_batch is None:
            return None
        return cls._of(context, int(raw_batch))

    @classmethod
    def current(cls, batch_id: int | None = None) -> TaskScope:
        """Read the scope of the running Spark task from ``TaskContext``.

        ``batch_id`` overrides the batch id for work driven by ``foreachBatch``,
        where Spark does not set the streaming local property.
        """
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            msg = "TaskScope.current() must run inside a Spark task"
            raise FiresteelError(msg)
        if batch_id is not None:
            return cls._of(context, batch_id)
        scope = cls.running()
        if scope is None:
            msg = (
                "this task is not part of a streaming micro-batch (no "
                "'streaming.sql.batchId' local property); use the sink through "
                "writeStream or firesteel.core.foreach_batch"
            )
            raise FiresteelError(msg)
        return scope

    @classmethod
    def _of(cls, context: Any, batch_id: int) -> TaskScope:
        return cls(
            query_id=context.getLocalProperty("sql.streaming.queryId") or "",
            batch_id=batch_id,
            partition_id=context.partitionId(),
            attempt=context.attemptNumber(),
        )
