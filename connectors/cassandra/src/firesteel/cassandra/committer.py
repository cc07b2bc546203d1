"""A :class:`CheckpointCommitter` keeping its records in a Cassandra table, as Flink's does.

One row per (sink id, partition) holds the last batch whose segment of that
partition was sent: ``(sink_id text, partition int, batch bigint, PRIMARY KEY
((sink_id), partition))``. Each record is written with ``USING TIMESTAMP
<batch>``, so Cassandra's last-write-wins keeps the highest batch even if a
slow, older commit lands after a newer one: a record never moves backwards,
which :meth:`is_committed` (``stored batch >= asked batch``) relies on.
"""

from __future__ import annotations

from typing import Any

from firesteel.cassandra.client import session_for
from firesteel.cassandra.options import CassandraSinkOptions
from firesteel.sinks.committers import CheckpointCommitter


class CassandraCommitter(CheckpointCommitter):
    """Records in ``keyspace.table`` (created if missing) on the cluster of ``options``."""

    def __init__(self, options: CassandraSinkOptions, keyspace: str, table: str) -> None:
        self.options = options
        self.keyspace = keyspace
        self.table = table

    def _session(self) -> Any:
        return session_for(self.options)

    def open(self) -> None:
        """Create the table (idempotent); the keyspace must exist."""
        self._session().execute(
            f'CREATE TABLE IF NOT EXISTS "{self.keyspace}"."{self.table}" '
            "(sink_id text, partition int, batch bigint, PRIMARY KEY ((sink_id), partition))"
        )

    def is_committed(self, sink_id: str, batch_id: int, partition_id: int) -> bool:
        row = (
            self._session()
            .execute(
                f'SELECT batch FROM "{self.keyspace}"."{self.table}" '
                "WHERE sink_id = %s AND partition = %s",
                (sink_id, partition_id),
            )
            .one()
        )
        return row is not None and int(row.batch) >= batch_id

    def commit(self, sink_id: str, batch_id: int, partition_id: int) -> None:
        self._session().execute(
            f'INSERT INTO "{self.keyspace}"."{self.table}" (sink_id, partition, batch) '
            f"VALUES (%s, %s, %s) USING TIMESTAMP {int(batch_id)}",
            (sink_id, partition_id, batch_id),
        )

    def __repr__(self) -> str:
        return f"CassandraCommitter({self.keyspace}.{self.table})"
