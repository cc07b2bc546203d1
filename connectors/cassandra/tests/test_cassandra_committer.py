"""The Cassandra checkpoint committer against the CQL server, read back by a fresh driver."""

from __future__ import annotations

from typing import Any

import pytest

from firesteel.cassandra.committer import CassandraCommitter
from firesteel.cassandra.options import CassandraSinkOptions
from firesteel.core.errors import ConfigError


def _committer(
    session: Any, address: tuple[str, int], owner: str = "query-a"
) -> CassandraCommitter:
    host, port = address
    options = CassandraSinkOptions(
        contact_points=host, port=port, keyspace=session.keyspace, table="unused"
    )
    return CassandraCommitter(options, session.keyspace, "wal_commits", owner)


def test_records_survive_and_never_move_backwards(
    session: Any, cluster_address: tuple[str, int]
) -> None:
    committer = _committer(session, cluster_address)
    committer.open()
    committer.open()  # idempotent
    assert not committer.is_committed("s", 3, 0)
    committer.commit("s", 3, 0)
    committer.commit("s", 3, 0)  # twice == once
    committer.commit("s", 2, 0)  # a late, older commit must not win
    assert committer.is_committed("s", 3, 0)
    assert committer.is_committed("s", 2, 0)
    assert not committer.is_committed("s", 4, 0)
    assert not committer.is_committed("s", 3, 1)
    assert not committer.is_committed("other", 3, 0)
    rows = list(session.execute("SELECT sink_id, partition, batch FROM wal_commits"))
    assert [(r.sink_id, r.partition, r.batch) for r in rows] == [("s", 0, 3)]


def test_records_of_another_query_are_refused_not_taken_as_sent(
    session: Any, cluster_address: tuple[str, int]
) -> None:
    """A recreated checkpoint (new query id) with the old sink.id would otherwise skip batches."""
    old = _committer(session, cluster_address, owner="query-a")
    old.open()
    old.commit("s", 7, 0)
    recreated = _committer(session, cluster_address, owner="query-b")
    with pytest.raises(ConfigError, match=r"sink.id 's' is recorded .* by query query-a"):
        recreated.is_committed("s", 0, 0)
    assert not recreated.is_committed("fresh", 0, 0)
