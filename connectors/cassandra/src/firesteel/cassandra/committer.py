"""A :class:`CheckpointCommitter` keeping its records in a Cassandra table, as Flink's does.

One row per (sink id, partition) holds the last batch whose segment of that
partition was sent and the query that sent it: ``(sink_id text, partition
int, batch bigint, owner text, PRIMARY KEY ((sink_id), partition))``. Each
record is written with ``USING TIMESTAMP <batch>``, so Cassandra's
last-write-wins keeps the highest batch even if a slow, older commit lands
after a newer one: a record never moves backwards, which :meth:`is_committed`
(``stored batch >= asked batch``) relies on.

The rows live outside the checkpoint, so they outlive it. A query whose
checkpoint was deleted and recreated starts again at batch 0 under a new
Spark query id; had it kept an explicit ``sink.id``, the old rows would mark
every one of its batches as sent and its data would silently never arrive.
``owner`` (Spark's query id) makes that a :class:`ConfigError` instead, as
the Kafka sink's markers do; with ``sink.id`` unset the id is derived from
the query and never collides.
"""

from __future__ import annotations

from typing import Any

from firesteel.cassandra.client import Backoff, retriable_errors, session_for
from firesteel.cassandra.options import CassandraSinkOptions
from firesteel.core.toolkit import Ownership
from firesteel.sinks.spi import CheckpointCommitter


class CassandraCommitter(CheckpointCommitter):
    """Records of query ``owner`` in ``keyspace.table`` (created if missing)."""

    def __init__(
        self, options: CassandraSinkOptions, keyspace: str, table: str, owner: str
    ) -> None:
        self.options = options
        self.keyspace = keyspace
        self.table = table
        self.owner = owner

    def _session(self) -> Any:
        return session_for(self.options)

    def _execute(self, statement: Any, params: tuple[Any, ...]) -> Any:
        """Run one record statement; re-sent with backoff for ``retry.timeout.ms`` once the
        driver's own attempts failed (a record rewritten with its timestamp is the same)."""
        backoff = Backoff(self.options.retry_timeout_ms / 1000)
        while True:
            try:
                return self._session().execute(statement, params)
            except retriable_errors() as exc:
                if not backoff.pause(f"commit record in {self.keyspace}.{self.table}", exc):
                    raise

    def open(self) -> None:
        """Create the table (idempotent); the keyspace must exist."""
        self._session().execute(
            f'CREATE TABLE IF NOT EXISTS "{self.keyspace}"."{self.table}" '
            "(sink_id text, partition int, batch bigint, owner text, "
            "PRIMARY KEY ((sink_id), partition))"
        )

    def is_committed(self, sink_id: str, batch_id: int, partition_id: int) -> bool:
        row = self._execute(
            _idempotent(
                f'SELECT batch, owner FROM "{self.keyspace}"."{self.table}" '
                "WHERE sink_id = %s AND partition = %s"
            ),
            (sink_id, partition_id),
        ).one()
        if row is None:
            return False
        Ownership(
            subject=f"firesteel.cassandra: sink.id {sink_id!r} is recorded in "
            f"{self.keyspace}.{self.table} by query {row.owner}: the id",
            query_id=self.owner,
            remedy="Two queries must not share a sink.id: choose another 'sink.id' (or leave "
            "it unset), or delete the old records: "
            f"DELETE FROM {self.keyspace}.{self.table} WHERE sink_id = '{sink_id}'",
        ).check(row.owner)
        return int(row.batch) >= batch_id

    def commit(self, sink_id: str, batch_id: int, partition_id: int) -> None:
        self._execute(
            _idempotent(
                f'INSERT INTO "{self.keyspace}"."{self.table}" (sink_id, partition, batch, owner) '
                f"VALUES (%s, %s, %s, %s) USING TIMESTAMP {int(batch_id)}"
            ),
            (sink_id, partition_id, batch_id, self.owner),
        )

    def __repr__(self) -> str:
        return f"CassandraCommitter({self.keyspace}.{self.table})"


def _idempotent(cql: str) -> Any:
    """A statement the session's retry policy may re-send: a record rewritten with the
    same timestamp is the same cell, and a SELECT changes nothing."""
    from cassandra.query import SimpleStatement

    return SimpleStatement(cql, is_idempotent=True)
