"""Test helpers: an in-memory CQL native-protocol v4 server and a cluster fixture.

:func:`cassandra_cluster` yields ``(host, port)``, first match wins:

1. ``FIRESTEEL_CASSANDRA_HOSTS`` (``host[:port],...``): an existing cluster;
2. otherwise a :mod:`firesteel.testing.cassandra.server` process on a free
   port of 127.0.0.1 (``python -m firesteel.testing.cassandra PORT``), so the
   server outlives a job the crash tests kill; stopped by PID.

The server is small and honest about what it is: rows in dicts keyed by primary
key, last write wins by the client's write timestamp, TTLs, counters, PREPARE /
EXECUTE / BATCH; no replication, no paging, no LWT. It counts the statements and
rows it executed (:class:`~firesteel.testing.cassandra.store.Store`).

Faults are injected over the protocol, so they reach every process that talks
to the server (Spark's workers too): :func:`inject` inserts a rule into the
table ``firesteel_faults.rules`` and :func:`clear` truncates it; a test may as
well send that CQL itself, or ``SELECT remaining FROM firesteel_faults.rules``
to see what is left. Kinds (:data:`FaultKind`), each for the next ``count``
QUERY / EXECUTE / BATCH requests whose CQL text contains ``match``
(case-insensitive; "" matches every data statement, never schema statements,
``USE`` or the driver's ``system`` queries), after letting ``skip`` of them
through:

- ``write_timeout``, ``read_timeout``, ``unavailable``, ``overloaded``: the
  ERROR of protocol v4 section 9 (0x1100 with writeType ``SIMPLE`` for a single
  statement, 0x1200, 0x1000, 0x1001), the statement not executed;
- ``write_timeout`` with ``applied=True``: executed, then the timeout sent, as
  real Cassandra may do (a timed-out write can still land on the replicas);
- ``drop``: the connection is closed instead of answering (``applied=True``:
  after executing the statement);
- ``slow``: executed, the reply held back ``delay_ms`` (and with it every later
  reply on that connection: one connection is one thread).

See :mod:`firesteel.testing.cassandra.faults` for the table and the rules.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any, Literal

from firesteel.testing.ports import NotListeningError, await_listening, free_port
from firesteel.testing.processes import REAPER

__all__ = [
    "HOSTS_ENV",
    "FaultKind",
    "cassandra_cluster",
    "clear",
    "connect",
    "inject",
    "start_server",
]

HOSTS_ENV = "FIRESTEEL_CASSANDRA_HOSTS"
"""Set to ``host[:port],...`` to run tests against an existing Cassandra cluster."""

FaultKind = Literal["write_timeout", "read_timeout", "unavailable", "overloaded", "drop", "slow"]
"""The fault kinds the server knows (``faults.KINDS``)."""


def start_server(timeout: float = 20.0) -> tuple[subprocess.Popen[bytes], int]:
    """Start the test server in a child process; returns it and its port once it accepts."""
    for _ in range(5):
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "firesteel.testing.cassandra", str(port)],
            stdout=subprocess.DEVNULL,
        )
        REAPER.guard(proc.pid)
        try:
            await_listening(proc, port, timeout, what="the CQL test server")
        except NotListeningError:
            proc.kill()
            proc.wait()
            continue
        return proc, port
    msg = "the CQL test server did not start (tried 5 free ports)"
    raise RuntimeError(msg)


@contextlib.contextmanager
def cassandra_cluster() -> Iterator[tuple[str, int]]:
    """``(contact point, port)``: ``FIRESTEEL_CASSANDRA_HOSTS`` if set, else a test server."""
    hosts = os.environ.get(HOSTS_ENV)
    if hosts:
        first = hosts.split(",")[0]
        host, _, port_text = first.partition(":")
        yield host, int(port_text or 9042)
        return
    proc, port = start_server()
    try:
        yield "127.0.0.1", port
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def connect(host: str, port: int, keyspace: str | None = None) -> object:
    """A protocol-v4 driver session for tests; the caller shuts down ``session.cluster``."""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import RoundRobinPolicy

    profile = ExecutionProfile(load_balancing_policy=RoundRobinPolicy())
    cluster = Cluster(
        [host], port=port, protocol_version=4, execution_profiles={EXEC_PROFILE_DEFAULT: profile}
    )
    return cluster.connect(keyspace)


def inject(
    host: str,
    port: int,
    kind: FaultKind,
    *,
    count: int,
    match: str = "",
    skip: int = 0,
    delay_ms: int = 0,
    applied: bool = False,
) -> str:
    """Arm a fault for ``count`` requests whose CQL contains ``match``; returns the rule id.

    The first ``skip`` matching requests go through unharmed, which puts a
    fault in the middle of a batch.

    A real Cassandra cluster has no rules table: the INSERT fails with
    ``InvalidRequest`` naming keyspace ``firesteel_faults``.
    """
    rule = f"{time.time_ns()}-{uuid.uuid4().hex[:8]}"
    _on_server(
        host,
        port,
        "INSERT INTO firesteel_faults.rules "
        "(id, kind, remaining, skip, match, delay_ms, applied) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (rule, kind, count, skip, match, delay_ms, applied),
    )
    return rule


def clear(host: str, port: int) -> None:
    """Disarm every fault rule."""
    _on_server(host, port, "TRUNCATE firesteel_faults.rules", ())


def _on_server(host: str, port: int, cql: str, values: tuple[object, ...]) -> None:
    session: Any = connect(host, port)
    try:
        session.execute(cql, values)
    finally:
        session.cluster.shutdown()
