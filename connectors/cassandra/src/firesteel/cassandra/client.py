"""Driver sessions per Python process, with connect errors that name the hosts tried."""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from firesteel.cassandra.errors import CassandraUnreachableError

logger = logging.getLogger(__name__)


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


_lock = threading.Lock()
_sessions: dict[tuple[Any, ...], Any] = {}


def session_for(options: ClusterOptions) -> Any:
    """A connected session for ``options``, shared by the tasks of one Python worker.

    Connecting costs a control connection and schema reads: a worker reuses its
    session across tasks and batches instead of paying that per task.
    """
    key = (
        tuple(options.hosts),
        options.port,
        options.local_dc,
        options.consistency,
        tuple(sorted(options.passthrough.items())),
    )
    with _lock:
        if key not in _sessions:
            _sessions[key] = _connect(options)
        return _sessions[key]


def _connect(options: ClusterOptions) -> Any:
    from cassandra import ConsistencyLevel
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable
    from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy

    extra = {k.lower().removeprefix("cassandra."): v for k, v in options.passthrough.items()}
    auth = None
    if "username" in extra:
        auth = PlainTextAuthProvider(extra["username"], extra.get("password", ""))
    profile = ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=options.local_dc)),
        consistency_level=ConsistencyLevel.name_to_value[options.consistency.upper()],
    )
    cluster = Cluster(
        options.hosts,
        port=options.port,
        protocol_version=4,
        auth_provider=auth,
        connect_timeout=float(extra.get("connect.timeout", "5")),
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
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
