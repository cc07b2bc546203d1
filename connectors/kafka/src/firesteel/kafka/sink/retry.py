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

A call that does not return within its timeout and :data:`GRACE_S` more is given up:
librdkafka's ``rd_kafka_send_offsets_to_transaction`` was seen waiting forever on its
own reply (a kept producer whose open transaction the coordinator rolled back while
the broker was away: the query's commit, and ``query.stop()``, hung with it). Each
call runs in a thread of its own, so the task can give up the wait; the producer is
then recorded fatal (never called again, a new one with the same transactional id
fences it) and the call fails as a :class:`SinkError`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from firesteel.core.spi import SinkError
from firesteel.core.toolkit import task_metrics
from firesteel.kafka.config import safe_error
from firesteel.kafka.outage import Outage
from firesteel.kafka.producing import DeliveryTracker, is_fencing

CALL_TIMEOUT = 60.0
"""Longest single attempt of a transactional call (retries continue until retry.timeout.ms)."""
GRACE_S = 30.0
"""How long past its own timeout a transactional call may take before it is given up."""


class CallGivenUp(SinkError):
    """A transactional call did not return in time and its producer was given up."""


def bounded(call: Callable[[float], object], timeout: float, where: str) -> None:
    """``call(timeout)``, given up with a :class:`CallGivenUp` if it has not returned
    :data:`GRACE_S` after ``timeout`` (module docs); its own error is raised as it is."""
    done = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            call(timeout)
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=f"firesteel-kafka {where}", daemon=True).start()
    if not done.wait(timeout + GRACE_S):
        msg = (
            f"firesteel.kafka sink: {where}: the client did not return within {timeout:.0f} s "
            f"and {GRACE_S:.0f} s more; the producer is given up (a new one fences it)"
        )
        raise CallGivenUp(msg)
    if failure:
        raise failure[0]


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
            try:
                bounded(call, timeout, f"{where}: {what}")
            except CallGivenUp as exc:
                if tracker is not None:
                    tracker.fatal = tracker.fatal or str(exc)
                raise

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
