"""The write-ahead-log sink (``mode=wal``): Flink's CassandraTupleWriteAheadSink for micro-batches.

Each task appends its partition of batch N to a log segment in checkpoint
storage (``<checkpoint>/firesteel/wal``, or the ``log.location`` option, e.g.
``s3a://bucket/wal`` with ``fs.s3a.*`` options;
:class:`~firesteel.sinks.write_ahead.WriteAheadSink`).
Nothing reaches Cassandra until every task of N has voted; then the driver's
commit sends the segments one at a time, streamed record batch by record
batch with at most ``max.in.flight`` requests outstanding, and after each one
the :class:`~firesteel.cassandra.committer.CassandraCommitter` records
(sink, partition) -> N in ``committer.keyspace.committer.table`` (created if
missing; one row per sink and partition, so it never grows with the batches).
Readers therefore never see a batch that is later rolled back, and a batch
re-run after it committed sends nothing again.

Every INSERT of batch N carries ``USING TIMESTAMP`` of the batch's write
stamp (:meth:`~firesteel.sinks.write_ahead.WriteAheadSink.write_stamp`): the
clock at N's first commit, kept in N's plan in the checkpoint, and always
above the stamp of batch N - 1. A re-sent segment therefore writes cells
identical to the first send, whatever the clock says at the restart; a clock
set back between batches cannot let an older batch's cell win over a newer
one's; and a late replay of an older batch never overwrites a newer one.
Rows of one batch with the same primary key are resolved as Cassandra
resolves equal timestamps (the larger value wins): deduplicate per key
upstream if the last row must win. ``timestamp.column`` overrides the batch
stamp per row.

The two at-least-once windows of the book, and why they are harmless here:

1. a crash *while sending* a segment: some of its rows reached Cassandra, the
   commit record did not; after the restart the whole segment is sent again;
2. a crash *after sending, before recording* (fault point ``wal.after_send``):
   every row reached Cassandra; after the restart the segment is sent again.

In both the re-send writes the same cells with the same timestamp, so an
INSERT-only table ends up exactly as after one send: the sink declares an
upsert target and the guarantee check grants exactly-once
(:attr:`~firesteel.core.guarantee.SinkKind.WRITE_AHEAD_LOG_UPSERT`).

Counter tables and list columns (``write=increment`` and ``write=append``,
:class:`CassandraAdditiveWalSink`) are the book's reason for the write-ahead
log: a replayed batch never reaches them, and a batch is sent once, after
Spark committed it. Inside the two windows a re-sent segment adds its rows
again (at most one segment per crash), so that sink is at-least-once, as
Table 8-1 says of the WAL column, and the guarantee check refuses it with
``guarantee=exactly-once``.

By default the send runs where Spark runs the batch's commit (the driver's
Python worker), one segment after another. With ``send.connect`` (a Spark
Connect URL of the job's own driver, which then runs the Connect server as a
plugin) the commit runs the sends as a Spark job instead, one task per
segment across the executors (:mod:`firesteel.sinks.fanout`); each task
sends its segment and records it, so the two windows above are the same,
per segment. Segments are streamed, never loaded whole, so memory stays
bounded by one record batch wherever they are sent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import ClassVar

import pyarrow as pa

from firesteel.cassandra.client import session_for
from firesteel.cassandra.committer import CassandraCommitter
from firesteel.cassandra.options import CassandraSinkOptions
from firesteel.cassandra.statement import RowStatement
from firesteel.core.faults import fault_point
from firesteel.core.spi import ConfigError
from firesteel.core.toolkit import StorageConfig, layout, query_identity
from firesteel.sinks.spi import WriteAheadSink

logger = logging.getLogger(__name__)

MID_SEND = fault_point(
    "cassandra.mid_send", "the first chunk of a segment was written to Cassandra, not the rest"
)
SEND_CHUNK_PER_REQUEST = 8
"""Rows bound per call, per allowed in-flight request: bounds the memory of one send."""


class CassandraWalSink(WriteAheadSink):
    """Logs each partition, inserts it once its batch commits; see the module docs."""

    name: ClassVar[str] = "firesteel.cassandra"
    upsert_target: ClassVar[bool] = True

    def __init__(
        self,
        options: CassandraSinkOptions,
        schema: pa.Schema,
        sink_id: str,
        checkpoint: str,
        storage: StorageConfig | None = None,
    ) -> None:
        if not checkpoint:
            msg = "firesteel.cassandra: mode=wal needs the query's 'checkpointLocation'"
            raise ConfigError(msg)
        committer = CassandraCommitter(
            options,
            options.committer_keyspace or options.keyspace,
            options.committer_table,
            query_identity(checkpoint),
        )
        super().__init__(
            sink_id,
            options.log_location or layout.write_ahead_log(checkpoint),
            committer,
            options.send_connect,
            storage,
        )
        self.options = options
        self.insert = RowStatement(options, schema, batch_timestamp=True)

    def prepare(self) -> None:
        """Check the table and columns, create the log folder and the commit table."""
        self.insert.prepare(session_for(self.options))
        super().prepare()

    def send_values(self, batches: Iterable[pa.RecordBatch], batch_id: int, partition: int) -> None:
        session = session_for(self.options)
        prepared = self.insert.prepare(session)
        stamp = self.write_stamp(batch_id)
        where = f"batch {batch_id} partition {partition}"
        chunk = self.options.max_in_flight * SEND_CHUNK_PER_REQUEST
        sent = 0
        for batch in batches:
            for start in range(0, batch.num_rows, chunk):
                sent += self.insert.execute(
                    session, prepared, [batch.slice(start, chunk)], where, stamp
                )
                if sent == min(chunk, batch.num_rows):
                    MID_SEND.fire(batch_id, partition)
        logger.info("firesteel.cassandra sink %s: %s sent %d rows", self.sink_id, where, sent)


class CassandraAdditiveWalSink(CassandraWalSink):
    """``write=increment|append``: counter updates or collection appends from the
    write-ahead log; at-least-once.

    A re-send inside the two windows (see the module docs) adds a segment's
    rows a second time, so the target is not an upsert target (a set-only
    append would be, but the sink does not know the column types when the
    guarantee is checked, so it claims the weaker one).
    """

    upsert_target: ClassVar[bool] = False
