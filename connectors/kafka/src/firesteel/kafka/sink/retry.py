"""How the exactly-once sink retries its transactional calls: librdkafka's error classes.

Retriable errors and a broker outage (a coordinator moving, a timeout, a restarting
broker: :func:`~firesteel.kafka.outage.is_outage`) are retried with backoff, each
wait logged, until ``retry.timeout.ms``; past it the task fails with an
:class:`~firesteel.kafka.errors.OutageError` naming the bootstrap servers, the
setting and the transactional id instead of hanging. A retried call is the same
call into the same transaction, which librdkafka allows after a retriable error:
nothing is sent twice. Abortable and fatal errors fail the task at once (an
abortable one after the transaction is aborted, so Spark retries the task with a
fresh one); a producer already fenced or fatal is never called again. Each retry
counts ``transactional_retries`` in the task's metrics (the task attempt whose vote
commits; a failed attempt's retries are not counted).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from firesteel.core.spi import SinkError, task_metrics
from firesteel.kafka.config import safe_error
from firesteel.kafka.outage import Outage
from firesteel.kafka.producing import DeliveryTracker, is_fencing

CALL_TIMEOUT = 60.0
"""Longest single attempt of a transactional call (retries continue until retry.timeout.ms)."""


@dataclass(frozen=True)
class TransactionalRetry:
    """Runs one producer's transactional calls under ``retry.timeout.ms``."""

    timeout_ms: int
    """Option ``retry.timeout.ms``."""
    config: Mapping[str, Any]
    """The client configuration (its bootstrap servers; its secrets are scrubbed from error
    texts)."""

    def run(
        self,
        call: Callable[[float], object],
        what: str,
        transactional_id: str,
        batch_id: int,
        tracker: DeliveryTracker | None,
    ) -> None:
        """Run ``call(timeout_seconds)``, retrying retriable errors until the deadline.

        Each attempt gets the time left, at most :data:`CALL_TIMEOUT` seconds.
        A fencing or fatal error is recorded on ``tracker``, so the producer
        is not called again (not even to abort).
        """
        from confluent_kafka import KafkaException

        where = f"{transactional_id} batch {batch_id}"
        outage = Outage("firesteel.kafka sink", self.config, self.timeout_ms)
        outage.window.open()  # the window counts from the first attempt
        attempts = 0

        def attempt(timeout: float) -> None:
            nonlocal attempts
            if tracker is not None:
                tracker.check_usable(where)
            if attempts:
                task_metrics().count("transactional_retries")
            attempts += 1
            call(timeout)

        try:
            outage.run(attempt, f"{where}: {what}", call_timeout=CALL_TIMEOUT)
        except KafkaException as exc:
            error = exc.args[0]
            if tracker is not None:
                tracker.fenced = tracker.fenced or is_fencing(error)
                if error.fatal():
                    tracker.fatal = tracker.fatal or error.str()
            kind = "abortable" if error.txn_requires_abort() else "fatal"
            text = safe_error(exc, self.config)
            msg = f"firesteel.kafka sink: {where}: {what} failed ({kind}): {text}"
            raise SinkError(msg) from exc
