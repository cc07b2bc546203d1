"""The upsert sink: idempotent INSERTs keyed by the table's primary key.

Every row of a task becomes one execution of a single prepared ``INSERT``
(:class:`~firesteel.cassandra.statement.RowStatement`), sent through
``execute_concurrent_with_args`` with at most ``max.in.flight`` requests
outstanding per task. A replay of batch N writes the same rows under the same
keys again, so with a resettable source the sink is exactly-once (Table 8-1,
column "idempotent"), with the temporary inconsistency of any idempotent sink
while a batch replays.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import ClassVar

import pyarrow as pa

from firesteel.cassandra.client import session_for
from firesteel.cassandra.options import CassandraSinkOptions
from firesteel.cassandra.statement import RowStatement
from firesteel.core.spi import IdempotentSink, TaskScope

logger = logging.getLogger(__name__)


class CassandraUpsertSink(IdempotentSink):
    """Upserts every row into ``keyspace.table``; see the module docs."""

    name: ClassVar[str] = "firesteel.cassandra"

    def __init__(self, options: CassandraSinkOptions, schema: pa.Schema, sink_id: str) -> None:
        self.options = options
        self.sink_id = sink_id
        self.insert = RowStatement(options, schema)

    def prepare(self) -> None:
        """Check up front that the keyspace, table and every column fit."""
        self.insert.prepare(session_for(self.options))

    def write(self, scope: TaskScope, batches: Iterator[pa.RecordBatch]) -> int:
        session = session_for(self.options)
        prepared = self.insert.prepare(session)
        where = f"batch {scope.batch_id} partition {scope.partition_id}"
        return self.insert.execute(session, prepared, batches, where)
