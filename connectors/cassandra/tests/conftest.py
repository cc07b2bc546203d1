"""Fixtures for the Cassandra connector: one CQL server process per session (or a real cluster).

The SparkSession, ``spark``, is the suite's (the root ``conftest.py``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from firesteel.testing.cassandra import cassandra_cluster, connect

_keyspaces = itertools.count()


@pytest.fixture(scope="session")
def cluster_address() -> Iterator[tuple[str, int]]:
    """``(host, port)`` of the test server, or of ``FIRESTEEL_CASSANDRA_HOSTS``."""
    with cassandra_cluster() as address:
        yield address


@pytest.fixture
def session(cluster_address: tuple[str, int]) -> Iterator[object]:
    """A driver session with a fresh keyspace ``USE``d, shut down after the test."""
    host, port = cluster_address
    sess = connect(host, port)
    name = f"t{next(_keyspaces)}"
    sess.execute(  # type: ignore[attr-defined]
        f"CREATE KEYSPACE IF NOT EXISTS {name} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    sess.set_keyspace(name)  # type: ignore[attr-defined]
    yield sess
    sess.cluster.shutdown()  # type: ignore[attr-defined]
