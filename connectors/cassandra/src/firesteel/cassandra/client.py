"""Driver sessions per Python process, with connect errors that name the hosts tried.

Every session retries idempotent statements (the sinks' INSERTs) with
:class:`IdempotentRetryPolicy`; anything else keeps the driver's own policy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from cassandra.policies import RetryPolicy
from firesteel.cassandra.errors import CassandraUnreachableError
from firesteel.core.toolkit import RetryWindow, WorkerCache

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
"""Attempts of one idempotent statement, the first included, before its error propagates."""
RECONNECT_MAX_DELAY = 30.0
"""Seconds between tries to reconnect to a node that is down, at most."""


FIRST_BACKOFF = 0.1
"""Seconds before the first re-send after the driver's attempts failed (doubling after each)."""
MAX_BACKOFF = 5.0
"""The longest wait between two re-sends."""


class Backoff:
    """Waits between re-sends of writes the driver gave up on, within ``timeout`` seconds.

    The driver's retries are immediate (see :class:`IdempotentRetryPolicy`);
    this is the slower loop around them that outlasts an outage of a few
    seconds: :data:`FIRST_BACKOFF`, doubling, at most :data:`MAX_BACKOFF`, the
    last wait cut to the time left (a :class:`~firesteel.core.toolkit.RetryWindow`
    opened when the first attempt was sent).
    """

    def __init__(self, timeout: float) -> None:
        self.window = RetryWindow(timeout, FIRST_BACKOFF, MAX_BACKOFF)
        self.window.open()

    def pause(self, what: str, error: object) -> bool:
        """Sleep before the next re-send of ``what``; False (no sleep) once time is up."""
        if self.window.expired:
            return False
        wait = self.window.next_wait()
        logger.warning(
            "firesteel.cassandra: %s failed after the driver's attempts (%s); "
            "sending again in %.1f s",
            what,
            error,
            wait,
        )
        time.sleep(wait)
        return True


def retriable_errors() -> tuple[type[BaseException], ...]:
    """The driver's errors a later re-send may cure: timeouts, unavailable or overloaded
    replicas, no host reachable."""
    from cassandra import OperationTimedOut, RequestExecutionException
    from cassandra.cluster import NoHostAvailable
    from cassandra.protocol import OverloadedErrorMessage

    return (RequestExecutionException, OperationTimedOut, NoHostAvailable, OverloadedErrorMessage)


class IdempotentRetryPolicy(RetryPolicy):
    """Retries idempotent statements on write timeouts, unavailable replicas, overloaded or
    failing coordinators and broken connections, up to ``max_attempts`` attempts in all.

    A statement marked idempotent (the sinks' INSERTs, which rewrite the same
    cells with the same timestamp) may be sent again even if the failed attempt
    was applied, which a write timeout never rules out. A write timeout is
    retried on the same coordinator; the other errors on the next host of the
    query plan, or on the same host when no other is up. Once the
    attempts are spent the driver raises the last error: the task fails, Spark
    re-runs the batch, and nothing is lost. Statements not marked idempotent,
    and read timeouts, get the driver's :class:`~cassandra.policies.RetryPolicy`.

    Retries are immediate, without backoff: the driver applies a policy's
    decision on its I/O thread at once and has no hook to delay it (sleeping in
    the policy would stall every request of the process). So the budget covers
    transient errors, not an outage. In particular, a broken connection to the
    only node marks that node down until the driver reconnects (the cluster's
    ``ExponentialReconnectionPolicy``, see :func:`session_for`), and a retry in
    the meantime fails at once with ``NoHostAvailable``. The sinks add a
    backoff of their own (``retry.timeout.ms``, see
    :mod:`firesteel.cassandra.statement`).
    """

    def __init__(
        self, max_attempts: int = MAX_ATTEMPTS, live_hosts: Callable[[], int] = lambda: 1
    ) -> None:
        """``live_hosts`` counts the hosts up, to choose between the same host and the next."""
        if max_attempts < 1:
            msg = f"max_attempts must be at least 1, got {max_attempts}"
            raise ValueError(msg)
        self.max_attempts = max_attempts
        self.live_hosts = live_hosts

    @staticmethod
    def _ours(query: Any) -> bool:
        """Whether this policy decides for ``query`` (else the driver's policy does)."""
        return bool(getattr(query, "is_idempotent", False))

    def _decide(
        self, retry_num: int, decision: int, consistency: int | None, error: object
    ) -> tuple[int, int | None]:
        if retry_num + 1 >= self.max_attempts:
            return self.RETHROW, None
        logger.info(
            "firesteel.cassandra: attempt %d of %d of an idempotent statement failed (%s); "
            "retrying on %s host",
            retry_num + 1,
            self.max_attempts,
            error,
            "the same" if decision == self.RETRY else "the next",
        )
        return decision, consistency

    def _elsewhere(self) -> int:
        return self.RETRY_NEXT_HOST if self.live_hosts() > 1 else self.RETRY

    def on_write_timeout(  # noqa: PLR0917 (the driver's signature)
        self,
        query: Any,
        consistency: int,
        write_type: str,
        required_responses: int,
        received_responses: int,
        retry_num: int,
    ) -> tuple[int, int | None]:
        """The same coordinator again: its replicas were slow, not the coordinator."""
        if not self._ours(query):
            return super().on_write_timeout(
                query, consistency, write_type, required_responses, received_responses, retry_num
            )
        error = f"write timeout, {received_responses} of {required_responses} replicas answered"
        return self._decide(retry_num, self.RETRY, consistency, error)

    def on_unavailable(
        self,
        query: Any,
        consistency: int,
        required_replicas: int,
        alive_replicas: int,
        retry_num: int,
    ) -> tuple[int, int | None]:
        """Another coordinator, if any, may see more replicas alive."""
        if not self._ours(query):
            return super().on_unavailable(
                query, consistency, required_replicas, alive_replicas, retry_num
            )
        error = f"unavailable, {alive_replicas} of {required_replicas} replicas alive"
        return self._decide(retry_num, self._elsewhere(), consistency, error)

    def on_request_error(
        self, query: Any, consistency: int | None, error: Exception, retry_num: int
    ) -> tuple[int, int | None]:
        """Overloaded or failing coordinator, broken connection: another host, if any."""
        if not self._ours(query):
            return super().on_request_error(query, consistency, error, retry_num)
        return self._decide(retry_num, self._elsewhere(), consistency, error)


class ClusterOptions(Protocol):
    """What a session is opened with: the sink's options and a lookup's both provide it."""

    @property
    def hosts(self) -> list[str]: ...

    @property
    def port(self) -> int: ...

    @property
    def local_dc(self) -> str | None: ...

    @property
    def consistency(self) -> str: ...

    @property
    def passthrough(self) -> dict[str, str]: ...


_sessions: WorkerCache[tuple[Any, ...], Any] = WorkerCache()


def session_for(options: ClusterOptions) -> Any:
    """A connected session for ``options``, shared by the tasks of one Python worker.

    Connecting costs a control connection and schema reads: a worker reuses its
    session across tasks and batches instead of paying that per task. Its
    default execution profile retries idempotent statements
    (:class:`IdempotentRetryPolicy`); a node marked down is reconnected after
    0.1 s, then with exponential backoff up to :data:`RECONNECT_MAX_DELAY`.
    """
    key = (
        tuple(options.hosts),
        options.port,
        options.local_dc,
        options.consistency,
        tuple(sorted(options.passthrough.items())),
    )
    return _sessions.get(key, lambda: _connect(options))


def _connect(options: ClusterOptions) -> Any:
    from cassandra import ConsistencyLevel
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable
    from cassandra.policies import (
        DCAwareRoundRobinPolicy,
        ExponentialReconnectionPolicy,
        HostDistance,
        TokenAwarePolicy,
    )

    extra = {k.lower().removeprefix("cassandra."): v for k, v in options.passthrough.items()}
    auth = None
    if "username" in extra:
        auth = PlainTextAuthProvider(extra["username"], extra.get("password", ""))
    balancing = TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=options.local_dc))

    def live_hosts() -> int:
        """Hosts up that query plans include (not those of remote data centers)."""
        return sum(
            1
            for host in cluster.metadata.all_hosts()
            if host.is_up and balancing.distance(host) != HostDistance.IGNORED
        )

    profile = ExecutionProfile(
        load_balancing_policy=balancing,
        consistency_level=ConsistencyLevel.name_to_value[options.consistency.upper()],
        retry_policy=IdempotentRetryPolicy(live_hosts=live_hosts),
    )
    cluster = Cluster(
        options.hosts,
        port=options.port,
        protocol_version=4,
        auth_provider=auth,
        connect_timeout=float(extra.get("connect.timeout", "5")),
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        # A node marked down (a broken connection is enough) takes every request until it is
        # reconnected: first try after 0.1 s, not the driver's 1 s, so a task Spark re-runs
        # finds it back; never stop trying (the driver's default gives up after 64 tries).
        reconnection_policy=ExponentialReconnectionPolicy(0.1, RECONNECT_MAX_DELAY, None),
    )
    try:
        return cluster.connect()
    except NoHostAvailable as exc:
        cluster.shutdown()
        tried = ", ".join(f"{h}:{options.port}" for h in options.hosts)
        msg = (
            f"firesteel.cassandra: no contact point answered (option 'contact.points' = {tried}): "
            f"{'; '.join(f'{h}: {e}' for h, e in exc.errors.items())}"
        )
        raise CassandraUnreachableError(msg) from exc
