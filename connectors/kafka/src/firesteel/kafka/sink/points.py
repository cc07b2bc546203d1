"""The Kafka sinks' fault points (see :mod:`firesteel.core.faults`), declared once for both
sinks: the plain sink fires the first two, the exactly-once sink all four."""

from __future__ import annotations

from firesteel.core.faults import fault_point

AFTER_PRODUCE = fault_point(
    "kafka.after_produce", "a task handed its records to the producer, before the flush"
)
AFTER_FLUSH = fault_point("kafka.after_flush", "the broker acknowledged a task's records")
BEFORE_COMMIT_TRANSACTION = fault_point(
    "kafka.before_commit_transaction", "a task's transaction is flushed, before its commit"
)
AFTER_COMMIT_TRANSACTION = fault_point(
    "kafka.after_commit_transaction", "a task's transaction committed, before its vote"
)
