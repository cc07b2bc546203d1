"""How the exactly-once sink retries its transactional calls: librdkafka's error classes.

Retriable errors (a coordinator moving, a timeout) are retried until
``retry.timeout.ms``; abortable and fatal ones fail the task at once; a
producer already fenced or fatal is never called again. Past the deadline the
task fails with a :class:`~firesteel.core.errors.SinkError` naming the
transactional id instead of hanging.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from firesteel.core.spi import SinkError
from firesteel.kafka.config import safe_error
from firesteel.kafka.producing import DeliveryTracker, is_fencing

logger = logging.getLogger(__name__)

CALL_TIMEOUT = 60.0
"""Longest single attempt of a transactional call (retries continue until retry.timeout.ms)."""


@dataclass(frozen=True)
class TransactionalRetry:
    """Runs one producer's transactional calls under ``retry.timeout.ms``."""

    timeout_ms: int
    """Option ``retry.timeout.ms``."""
    config: Mapping[str, Any]
    """The client configuration, whose secrets are scrubbed from error texts."""

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
        deadline = time.monotonic() + self.timeout_ms / 1000
        attempts = 0
        while True:
            if tracker is not None:
                tracker.check_usable(where)
            left = deadline - time.monotonic()
            try:
                attempts += 1
                call(max(1.0, min(CALL_TIMEOUT, left)))
                return
            except KafkaException as exc:
                error = exc.args[0]
                text = safe_error(exc, self.config)
                if error.retriable() and time.monotonic() < deadline:
                    logger.info("firesteel.kafka sink: %s: %s (retrying)", what, text)
                    time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
                    continue
                if error.retriable():
                    msg = (
                        f"firesteel.kafka sink: {where}: {what} still failed after {attempts} "
                        f"attempts within retry.timeout.ms={self.timeout_ms}: {text}. Is the "
                        "cluster reachable and its transaction coordinator available?"
                    )
                    raise SinkError(msg) from exc
                if tracker is not None:
                    tracker.fenced = tracker.fenced or is_fencing(error)
                    if error.fatal():
                        tracker.fatal = tracker.fatal or error.str()
                kind = "abortable" if error.txn_requires_abort() else "fatal"
                msg = f"firesteel.kafka sink: {where}: {what} failed ({kind}): {text}"
                raise SinkError(msg) from exc


def retries_ran_out(exc: SinkError) -> bool:
    """Whether a transactional call failed only because its retriable errors outlasted the
    deadline (a new producer would wait as long again), not because it was refused."""
    from confluent_kafka import KafkaException

    cause = exc.__cause__
    return isinstance(cause, KafkaException) and bool(cause.args[0].retriable())
