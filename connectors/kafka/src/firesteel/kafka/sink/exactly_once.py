"""``exactly.once.mode=in-task``: each write task commits its own Kafka transaction.

:class:`KafkaExactlyOnceSink` is :class:`~firesteel.kafka.sink.transactions.KafkaTransactions`
run by Spark's write tasks, one transaction per (batch N, Spark partition p), as
an :class:`~firesteel.core.spi.InTaskCommitSink`: the driver's commit has
nothing left to commit and checks that a re-run batch kept its partition count.
The default mode, :class:`~firesteel.kafka.sink.write_ahead.KafkaWriteAheadSink`,
runs the same transactions from the batch's commit. The two modes measured side
by side: the connector's README, "Exactly-once modes".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import ClassVar

from firesteel.core.spi import CommitOutcome, InTaskCommitSink, TaskScope
from firesteel.kafka.options import KafkaSinkOptions
from firesteel.kafka.sink.partition_count import PartitionLayout
from firesteel.kafka.sink.transaction import KafkaCommittable, KafkaTransaction, TransactionScope
from firesteel.kafka.sink.transactions import KafkaTransactions

logger = logging.getLogger(__name__)


class KafkaExactlyOnceSink(KafkaTransactions, InTaskCommitSink[KafkaTransaction, KafkaCommittable]):
    """``exactly.once.mode=in-task``: the transactions of :class:`KafkaTransactions`,
    one per write task, committed in the task.

    ``layout`` (from the query's checkpoint) checks at each commit that a re-run batch
    kept its partition count; ``None`` where there is no checkpoint (``foreachBatch``).
    """

    name: ClassVar[str] = "firesteel.kafka"
    committable_type = KafkaCommittable

    def __init__(
        self,
        options: KafkaSinkOptions,
        sink_id: str,
        layout: PartitionLayout | None = None,
        checkpoint: str = "",
    ) -> None:
        super().__init__(options, sink_id, checkpoint)
        self.layout = layout

    def prepare(self) -> None:
        """Check the cluster (:meth:`~KafkaTransactions.check_target`), then recover."""
        self.check_target()
        super().prepare()

    def begin_transaction(self, scope: TaskScope) -> KafkaTransaction:
        return self.begin(TransactionScope.of_task(scope))

    def commit(self, batch_id: int, handles: Sequence[KafkaCommittable]) -> CommitOutcome:
        """Nothing to commit (:class:`InTaskCommitSink`): every task committed its own
        transaction and marker. Check the partition count against earlier attempts
        (:class:`~firesteel.kafka.sink.partition_count.PartitionLayout`) and log what they did."""
        rows = sum(h.rows for h in handles if not h.skipped)
        skipped = sum(1 for h in handles if h.skipped)
        if self.layout is not None:
            self.layout.check(batch_id, len(handles), rows > 0, self.committed_at)
        logger.info(
            "firesteel.kafka sink %s: batch %d committed (%d rows, %d partitions already done)",
            self.sink_id,
            batch_id,
            rows,
            skipped,
        )
        if handles and skipped == len(handles):
            return CommitOutcome.ALREADY_COMMITTED
        return CommitOutcome.COMMITTED
