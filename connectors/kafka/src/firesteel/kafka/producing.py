"""Producing with every delivery report checked, and librdkafka's error classes.

librdkafka sorts errors into three kinds, and so does firesteel
(https://github.com/confluentinc/librdkafka/blob/master/INTRODUCTION.md#error-handling):

* retriable: librdkafka retries by itself (``message.timeout.ms`` bounds it);
  a transactional call that raises a retriable error is simply called again;
* abortable (``txn_requires_abort``): the transaction is aborted and the task
  fails, so Spark retries it with a fresh transaction;
* fatal (``fatal()``, e.g. fenced by a newer instance): the producer is
  unusable; the task fails with the error.

A delivery report that carries an error means the record is not written:
the task fails rather than vote for data that is missing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from firesteel.core.errors import SinkError
from firesteel.kafka.config import safe_error, scrub, secrets_of
from firesteel.kafka.rows import ProduceArgs

logger = logging.getLogger(__name__)

POLL_EVERY = 10_000


@dataclass
class DeliveryTracker:
    """Collects failed delivery reports and fatal client errors of one producer."""

    config: dict[str, Any]
    failures: list[str] = field(default_factory=list)
    failed: int = 0
    fatal: str | None = None
    fenced: bool = False
    """A newer instance with the same transactional id took over (it aborted our transaction)."""

    def on_delivery(self, err: Any, _msg: Any) -> None:
        """librdkafka delivery callback (only failures arrive: delivery.report.only.error)."""
        if err is not None:
            self.failed += 1
            self.fenced = self.fenced or is_fencing(err)
            if len(self.failures) < 5:
                self.failures.append(err.str())

    def on_error(self, err: Any) -> None:
        """librdkafka global error callback."""
        self.fenced = self.fenced or is_fencing(err)
        if err.fatal():
            self.fatal = err.str()
        else:
            logger.info("firesteel.kafka producer: %s", scrub(err.str(), secrets_of(self.config)))

    def reset(self) -> None:
        """Forget earlier tasks' results (producers are reused between tasks)."""
        self.failures.clear()
        self.failed = 0

    def check(self, what: str, remaining: int = 0) -> None:
        """Raise :class:`SinkError` if any record was not acknowledged."""
        secrets = secrets_of(self.config)
        if self.fatal is not None:
            fatal = scrub(self.fatal, secrets)
            msg = f"firesteel.kafka sink: {what}: fatal producer error: {fatal}"
            raise SinkError(msg)
        if self.failed or remaining:
            first = scrub(self.failures[0], secrets) if self.failures else "delivery timed out"
            msg = (
                f"firesteel.kafka sink: {what}: {self.failed + remaining} records were not "
                f"acknowledged (first error: {first}); the task fails so Spark retries it"
            )
            raise SinkError(msg)


def is_fencing(err: Any) -> bool:
    """Whether ``err`` says a newer producer with our transactional id exists."""
    from confluent_kafka import KafkaError

    return err.code() in (
        KafkaError.PRODUCER_FENCED,
        KafkaError._FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    )


def tracked_config(config: dict[str, Any], tracker: DeliveryTracker) -> dict[str, Any]:
    """``config`` with the tracker's callbacks; only failed deliveries are reported."""
    return {
        **config,
        "on_delivery": tracker.on_delivery,
        "error_cb": tracker.on_error,
        "delivery.report.only.error": True,
    }


def produce_all(producer: Any, args: ProduceArgs) -> None:
    """Hand every row to librdkafka, waiting for queue space when it is full."""
    produce = producer.produce
    for count, (topic, value, key, partition, timestamp, headers) in enumerate(args, 1):
        while True:
            try:
                produce(topic, value, key, partition, timestamp=timestamp, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        if count % POLL_EVERY == 0:
            producer.poll(0)


def flush(producer: Any, tracker: DeliveryTracker, timeout_ms: int, what: str) -> None:
    """Wait for every delivery report; raise if any record failed or is still pending."""
    remaining = producer.flush(timeout_ms / 1000)
    tracker.check(what, remaining)


def describe(exc: BaseException, config: dict[str, Any]) -> str:
    """An error's text without secrets."""
    return safe_error(exc, config)
