"""Test helpers: an in-memory CQL native-protocol v4 server and a cluster fixture.

:func:`cassandra_cluster` yields ``(host, port)``, first match wins:

1. ``FIRESTEEL_CASSANDRA_HOSTS`` (``host[:port],...``): an existing cluster;
2. otherwise a :mod:`firesteel.cassandra.testing.server` process on a free
   port of 127.0.0.1 (``python -m firesteel.cassandra.testing PORT``), so the
   server outlives a job the crash tests kill; stopped by PID.

The server is small and honest about what it is: rows in dicts keyed by primary
key, last write wins by the client's write timestamp, TTLs, counters, PREPARE /
EXECUTE / BATCH; no replication, no paging, no LWT. It counts the statements and
rows it executed (:class:`~firesteel.cassandra.testing.store.Store`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

from firesteel.testing.ports import free_port

__all__ = ["HOSTS_ENV", "cassandra_cluster", "connect", "start_server"]

HOSTS_ENV = "FIRESTEEL_CASSANDRA_HOSTS"
"""Set to ``host[:port],...`` to run tests against an existing Cassandra cluster."""


def start_server(timeout: float = 20.0) -> tuple[subprocess.Popen[bytes], int]:
    """Start the test server in a child process; returns it and its port once it accepts."""
    for _ in range(5):
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "firesteel.cassandra.testing", str(port)],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                return proc, port
            time.sleep(0.05)
        proc.kill()
        proc.wait()
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
