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
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from firesteel.core.spi import SinkError
from firesteel.kafka.config import safe_error, scrub, secrets_of
from firesteel.kafka.outage import Outage, is_outage
from firesteel.kafka.produce_args import ProduceArgs

logger = logging.getLogger(__name__)

FLUSH_POLL_SECONDS = 0.1
"""Longest single wait while flushing, so a fenced producer is noticed promptly."""
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
    down: str | None = None
    """The last error saying the brokers are away (:func:`~firesteel.kafka.outage.is_outage`),
    until :func:`flush` sees records delivered again."""

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
            return
        if is_outage(err):
            self.down = err.str()
        logger.info("firesteel.kafka producer: %s", scrub(err.str(), secrets_of(self.config)))

    def reset(self) -> None:
        """Forget earlier tasks' results (producers are reused between tasks)."""
        self.failures.clear()
        self.failed = 0
        self.down = None

    @property
    def unusable(self) -> bool:
        """Fenced or fatally failed: no call may go into the producer again."""
        return self.fatal is not None or self.fenced

    def check_usable(self, what: str) -> None:
        """Raise :class:`SinkError` if the producer is fenced or fatally failed.

        Called before every call into a producer: once librdkafka raised a
        fatal error (e.g. fenced by a newer instance with the same
        transactional id), confluent-kafka's ``flush()`` can fail with a bare
        ``SystemError``, so firesteel never calls into such a producer again.
        """
        error = self.unusable_error(what)
        if error is not None:
            raise error

    def unusable_error(self, what: str) -> SinkError | None:
        """The :class:`SinkError` that :meth:`check_usable` raises, or ``None``."""
        if not self.unusable:
            return None
        reason = scrub(self.fatal or "fenced by a newer instance", secrets_of(self.config))
        fenced = " (fenced: a newer attempt with the same transactional id took over)"
        msg = (
            f"firesteel.kafka sink: {what}: fatal producer error: {reason}"
            f"{fenced if self.fenced else ''}; the producer is not used again"
        )
        return SinkError(msg)

    def check(self, what: str, remaining: int = 0) -> None:
        """Raise :class:`SinkError` if the producer failed or any record was not acknowledged."""
        secrets = secrets_of(self.config)
        self.check_usable(what)
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


def produce_all(
    producer: Any, args: ProduceArgs, tracker: DeliveryTracker | None = None, what: str = ""
) -> None:
    """Hand every row to librdkafka, waiting for queue space when it is full.

    With a ``tracker``, stops with :class:`SinkError` as soon as the producer
    turns fenced or fatal instead of calling into it again. Its state changes
    only in callbacks, which run inside ``poll``, so it is checked before the
    first row and after every ``poll``.

    Rows without timestamp and headers go through the positional call: keyword
    arguments made ``produce`` about 2.5x as costly per call (1.0-1.2M against
    2.7-3.0M calls/s into a local queue), which at 100-byte records is a large
    part of the sink's Python time.
    """
    from confluent_kafka import KafkaException

    produce = producer.produce
    send: Callable[..., None]
    if args.positional:
        send = produce
    else:

        def send(*row: Any) -> None:
            topic, value, key, partition, timestamp, headers = row
            produce(topic, value, key, partition, timestamp=timestamp, headers=headers)

    if tracker is not None:
        tracker.check_usable(what)
    for count, row in enumerate(args.rows(), 1):
        try:
            send(*row)
        except BufferError:
            _send_when_accepted(producer, send, row, tracker, what)
        except KafkaException as exc:
            _refused(exc, tracker, what)
        if count % POLL_EVERY == 0:
            producer.poll(0)
            if tracker is not None:
                tracker.check_usable(what)


def _send_when_accepted(
    producer: Any,
    send: Callable[..., None],
    row: tuple[Any, ...],
    tracker: DeliveryTracker | None,
    what: str,
) -> None:
    """The slow path of :func:`produce_all`: retry ``row`` while librdkafka's queue is full."""
    from confluent_kafka import KafkaException

    while True:
        producer.poll(0.05)
        if tracker is not None:
            tracker.check_usable(what)
        try:
            send(*row)
            return
        except BufferError:
            continue
        except KafkaException as exc:
            _refused(exc, tracker, what)


def _refused(exc: Any, tracker: DeliveryTracker | None, what: str) -> None:
    """``produce`` raised ``exc``: re-raise it, or, when fatal, raise the tracker's error."""
    if tracker is None or not exc.args[0].fatal():
        raise exc
    tracker.fatal = tracker.fatal or exc.args[0].str()
    tracker.fenced = tracker.fenced or is_fencing(exc.args[0])
    tracker.check_usable(what)


def flush(
    producer: Any,
    tracker: DeliveryTracker,
    timeout_ms: int,
    what: str,
    outage: Outage | None = None,
) -> None:
    """Wait for every delivery report; raise if any record failed or is still pending.

    librdkafka keeps undelivered records queued while the brokers are away and
    sends them when they are back (the idempotent producer without duplicates).
    With ``outage`` (option ``retry.timeout.ms``), a flush that has the tracker
    report the brokers down and sees no record delivered logs its wait and, past
    the window, raises :class:`~firesteel.kafka.errors.OutageError` naming the
    servers and the setting; ``timeout_ms`` bounds the whole flush either way.

    Polls instead of calling ``producer.flush()``: when a transactional
    producer is fenced during ``flush()``, confluent-kafka raises a
    ``KafkaError`` that is not an exception class, which no ``except`` can
    catch and which resurfaces later (seen ending a pytest run with exit 1).
    ``poll()`` raises a proper ``KafkaException`` instead, turned into a
    :class:`SinkError` here. Polling delivers the same callbacks, and the loop stops as soon as the
    tracker sees the producer fenced or fatal, never calling into it again.
    """
    from confluent_kafka import KafkaException

    tracker.check_usable(what)
    deadline = time.monotonic() + timeout_ms / 1000
    pending = len(producer)
    try:
        while pending and not tracker.unusable:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            producer.poll(min(FLUSH_POLL_SECONDS, left))
            pending = _watch(producer, tracker, pending, outage, what)
    except KafkaException as exc:
        if not exc.args[0].fatal():
            raise
        tracker.fatal = tracker.fatal or exc.args[0].str()
        tracker.fenced = tracker.fenced or is_fencing(exc.args[0])
        error = tracker.unusable_error(what)
        assert error is not None
        raise error from exc
    tracker.check(what, len(producer))


def _watch(
    producer: Any, tracker: DeliveryTracker, pending: int, outage: Outage | None, what: str
) -> int:
    """Records still pending; ``outage`` learns of deliveries and of the brokers away."""
    now = len(producer)
    if outage is None:
        return now
    if now < pending:
        tracker.down = None
        outage.recovered()
    elif tracker.down is not None:
        outage.noticed(f"{what}: flushing {now} records", tracker.down)
    outage.check(f"{what}: flushing {now} records")
    return now


def describe(exc: BaseException, config: dict[str, Any]) -> str:
    """An error's text without secrets."""
    return safe_error(exc, config)
