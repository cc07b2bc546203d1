"""Riding out a broker outage: retried with backoff within ``retry.timeout.ms``, then a failure
naming the bootstrap servers and the setting.

A broker restarting (a rolling restart, a crash and its recovery) makes librdkafka's
requests fail with ``_TRANSPORT``, ``_ALL_BROKERS_DOWN`` or ``_TIMED_OUT``, none of
which it flags retriable, while producers keep their queued records and retry them
by themselves. The source's and the sinks' requests that fail this way are waited
out: each wait is logged (warning) with the servers and the time left, and a
request still failing once the window since the outage began is over raises
:class:`~firesteel.kafka.errors.OutageError`, naming both. Fatal, fencing and
abortable errors are never retried here: they go to their callers' policies
(:mod:`firesteel.kafka.sink.retry`).

A query's very first contact is not patient: pointed at the wrong host or port, it
fails within :data:`~firesteel.kafka.first_contact.CONNECT_TIMEOUT`. A query that has
committed a batch (:func:`~firesteel.core.toolkit.has_committed`) has reached its cluster
before, and rides out an outage from its first request on, also after a restart.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from firesteel.core.toolkit import RetryWindow
from firesteel.kafka.config import safe_error, scrub, secrets_of
from firesteel.kafka.errors import OutageError

logger = logging.getLogger(__name__)

T = TypeVar("T")

SETTING = "retry.timeout.ms"
"""The option that sets the window, on the source and the sinks alike."""
CALL_TIMEOUT = 10.0
"""Longest single attempt of a request: short enough to retry soon after the broker is back."""


def is_outage(error: Any) -> bool:
    """Whether librdkafka ``error`` (a ``KafkaError``) says the brokers are away for now."""
    from confluent_kafka import KafkaError

    if error.fatal() or error.txn_requires_abort():
        return False
    return bool(error.retriable()) or error.code() in (
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        # A broker handle replaced while a request waited on it (seen as a SIGKILLed
        # broker came back after 90 s): the request is answered by the new handle.
        KafkaError._DESTROY_BROKER,
        KafkaError._TIMED_OUT,
        KafkaError._WAIT_COORD,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
    )


@dataclass
class Outage:
    """The window of one operation (a request, a task's reads, a flush): started by the first
    failure, ended by progress, past ``timeout_ms`` an :class:`OutageError`.

    Not thread-safe; one per operation.
    """

    who: str
    """Starts every message: ``firesteel.kafka`` or ``firesteel.kafka sink``."""
    config: Mapping[str, Any]
    """The client configuration (its ``bootstrap.servers``; secrets scrubbed from errors)."""
    timeout_ms: int
    """Option ``retry.timeout.ms``."""
    window: RetryWindow = field(init=False)
    """The current outage's window and backoff (open while the brokers fail)."""
    logged: float = 0.0
    """When :meth:`noticed` last logged (``time.monotonic()``); 0 since the last recovery."""
    reason: str = ""
    """The last failure's text (secrets scrubbed)."""

    def __post_init__(self) -> None:
        self.window = RetryWindow(self.timeout_ms / 1000)

    @property
    def servers(self) -> str:
        """The bootstrap servers, as configured."""
        return str(self.config.get("bootstrap.servers", ""))

    def recovered(self) -> None:
        """The brokers answered: a later failure starts a new window."""
        if self.window.ongoing and (self.window.waits or self.logged):
            logger.info(
                "%s: brokers %s answered again after %.1f s",
                self.who,
                self.servers,
                self.window.elapsed,
            )
        self.window.close()
        self.logged = 0.0
        self.reason = ""

    def failed(self, what: str, reason: str, cause: BaseException | None = None) -> float:
        """Record a failure of ``what``; the seconds to wait before the next attempt.

        Logs the wait; raises :class:`OutageError` once the outage has lasted
        ``timeout_ms``. ``reason`` is the client's error text (scrubbed here).
        """
        self.window.open()
        self.reason = scrub(reason, secrets_of(self.config))
        self.check(what, cause)
        lasted, left = self.window.elapsed, self.window.left
        backoff = self.window.next_wait()
        logger.warning(
            "%s: %s: %s; retrying in %.1f s (brokers %s of option 'kafka.bootstrap.servers' "
            "failing for %.1f s, %.0f s left of option '%s' = %d ms)",
            self.who,
            what,
            self.reason,
            backoff,
            self.servers,
            lasted,
            left,
            SETTING,
            self.timeout_ms,
        )
        return backoff

    def noticed(self, what: str, reason: str) -> None:
        """Record a failure that the client itself retries (a consumer's fetches, a
        producer's queued records): starts the window, logs at most every
        longest wait of its window. The caller's loop calls :meth:`check`."""
        now = time.monotonic()
        self.window.open()
        self.reason = scrub(reason, secrets_of(self.config))
        self.check(what)
        if self.logged and now - self.logged < self.window.max_wait_s:
            return
        self.logged = now
        logger.warning(
            "%s: %s: %s; waiting for the client to reconnect (brokers %s of option "
            "'kafka.bootstrap.servers' failing for %.1f s, %.0f s left of option '%s' = %d ms)",
            self.who,
            what,
            self.reason,
            self.servers,
            self.window.elapsed,
            self.window.left,
            SETTING,
            self.timeout_ms,
        )

    @property
    def ongoing(self) -> bool:
        """Whether an outage began and nothing has answered since."""
        return self.window.ongoing

    def check(self, what: str, cause: BaseException | None = None) -> None:
        """Raise :class:`OutageError` if the current outage has lasted ``timeout_ms``."""
        if not self.window.expired:
            return
        why = f" (last error: {self.reason})" if self.reason else ""
        msg = (
            f"{self.who}: {what}: the brokers of option 'kafka.bootstrap.servers' "
            f"({self.servers}) did not answer for {self.window.elapsed:.0f} s, the limit set "
            f"by option '{SETTING}' ({self.timeout_ms} ms){why}. Check that the brokers run "
            f"and are reachable; raise '{SETTING}' to wait longer for a restarting cluster"
        )
        raise OutageError(msg) from cause

    def run(
        self,
        call: Callable[[float], T],
        what: str,
        also: Collection[int] = (),
        call_timeout: float = CALL_TIMEOUT,
    ) -> T:
        """``call(timeout_seconds)``, retried while it fails with an outage error
        (:func:`is_outage`) or one whose code is in ``also``; any other error is raised
        as it is. Each attempt gets the window's time left, at most ``call_timeout``."""
        from confluent_kafka import KafkaException

        while True:
            try:
                result = call(max(1.0, min(call_timeout, self.window.left)))
            except KafkaException as exc:
                if not (is_outage(exc.args[0]) or exc.args[0].code() in also):
                    raise
                time.sleep(self.failed(what, safe_error(exc, self.config), exc))
                continue
            self.recovered()
            return result
