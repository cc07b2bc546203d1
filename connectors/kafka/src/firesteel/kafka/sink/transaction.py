"""One exactly-once task's transaction and the vote it sends the driver."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from firesteel.core.spi import Committable, TaskScope
from firesteel.kafka.pool import TransactionalClient
from firesteel.kafka.produce_args import RowExtractor
from firesteel.kafka.producing import DeliveryTracker
from firesteel.kafka.sink.marker import NO_MARKER


class TxnState(enum.Enum):
    """Where one task's transaction is: NEW -> OPEN | SKIPPED; OPEN -> COMMITTED | ABORTED."""

    NEW = "new"
    """Nothing produced yet; opened lazily on the first non-empty batch."""
    OPEN = "open"
    SKIPPED = "skipped"
    """The marker says an earlier attempt committed this (batch, partition)."""
    COMMITTED = "committed"
    ABORTED = "aborted"


@dataclass(frozen=True)
class KafkaCommittable(Committable):
    """A task's vote: its transaction (already committed in the task) and its rows."""

    transactional_id: str
    rows: int
    skipped: bool
    """The marker said an earlier attempt had committed this (batch, partition)."""


@dataclass(frozen=True)
class TransactionScope:
    """What one transaction and its marker are keyed by: query, batch and partition.

    The partition is a task's (``exactly.once.mode=in-task``) or a write-ahead plan
    segment's, sent by the batch's commit on the driver (``write-ahead``); never a
    task attempt, which must not decide what is committed.
    """

    query_id: str
    batch_id: int
    partition_id: int

    @classmethod
    def of_task(cls, task: TaskScope) -> TransactionScope:
        """The scope of the transaction a write task commits itself."""
        return cls(task.query_id, task.batch_id, task.partition_id)


@dataclass
class KafkaTransaction:
    """One task's (or plan segment's) transaction: opened lazily, on the first non-empty
    batch."""

    scope: TransactionScope
    transactional_id: str
    client: TransactionalClient | None = None
    extractor: RowExtractor | None = None
    state: TxnState = TxnState.NEW
    opened_at: float = 0.0
    rows: int = 0
    committed_batch: int = NO_MARKER

    @property
    def producer(self) -> Any:
        """The transaction's producer (``None`` before it is opened)."""
        return self.client.producer if self.client is not None else None

    @property
    def tracker(self) -> DeliveryTracker | None:
        """The producer's delivery and error tracker."""
        return self.client.tracker if self.client is not None else None
