"""The prepared INSERT both Cassandra sinks bind rows to, and its checks against the table.

Columns are mapped by name; the statement is marked idempotent so the
driver's retry policy may retry it. A null column is sent as protocol-v4
UNSET (no tombstone) unless ``nulls=tombstone``. ``ttl`` / ``ttl.column`` add
``USING TTL``; the write timestamp comes from ``timestamp.column`` or, for the
write-ahead-log sink, from the batch (``USING TIMESTAMP ?`` either way).

``batch=partition`` sends the rows of one Arrow batch that share a partition
key together, in UNLOGGED batches of at most ``batch.rows`` rows (a row alone
in its partition is sent as a plain INSERT). A batch confined to one
partition is a single mutation on its replicas: one request and one commit
log entry instead of one per row, which pays when a micro-batch holds many
rows per partition (time series, wide rows); across partitions an UNLOGGED
batch only moves the fan-out to the coordinator, so rows are never batched
across keys. The rows of an UNLOGGED batch share one write timestamp: two
rows with the same primary key in one micro-batch then resolve by
Cassandra's tie-break on the value, not by their order, as they always do in
``mode=wal`` (one stamp per batch). An UNLOGGED batch is idempotent like its
INSERTs, and retried as one.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from firesteel.cassandra.errors import CassandraRecordError, CassandraSchemaError
from firesteel.cassandra.options import CassandraSinkOptions

logger = logging.getLogger(__name__)

_FITS: dict[str, tuple[str, ...]] = {
    "string": ("varchar", "text", "ascii", "uuid", "timeuuid", "inet"),
    "large_string": ("varchar", "text", "ascii", "uuid", "timeuuid", "inet"),
    "int8": ("tinyint", "smallint", "int", "bigint", "varint"),
    "int16": ("smallint", "int", "bigint", "varint"),
    "int32": ("int", "bigint", "varint"),
    "int64": ("bigint", "varint", "timestamp"),
    "float": ("float", "double"),
    "double": ("double",),
    "bool": ("boolean",),
    "binary": ("blob",),
    "large_binary": ("blob",),
    "date32[day]": ("date",),
}


def arrow_fits_cql(arrow_type: pa.DataType, cql_type: str) -> bool:
    """True when values of ``arrow_type`` can be bound to a ``cql_type`` column."""
    if pa.types.is_timestamp(arrow_type):
        return cql_type == "timestamp"
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        inner = cql_type.partition("<")[2].rstrip(">")
        collection = cql_type.startswith(("list<", "set<"))
        return collection and arrow_fits_cql(arrow_type.value_type, inner)
    return cql_type in _FITS.get(str(arrow_type), ())


def _partition_of(values: list[Any], indexes: list[int]) -> tuple[Any, ...]:
    """The partition key of one row's bound values, hashable (frozen collections as text)."""
    key = tuple(values[i] for i in indexes)
    try:
        hash(key)
    except TypeError:
        return tuple(repr(v) for v in key)
    return key


def _micros(value: Any) -> int:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return int(value.timestamp() * 1_000_000)
    return int(value)


class InsertStatement:
    """The INSERT of ``schema``'s columns into ``keyspace.table`` (see the module docs).

    ``batch_timestamp``: every row carries a write timestamp given per call
    (:meth:`execute`), unless ``timestamp.column`` names a column for it.
    """

    def __init__(
        self, options: CassandraSinkOptions, schema: pa.Schema, *, batch_timestamp: bool = False
    ) -> None:
        self.options = options
        self.schema = schema
        special = {options.ttl_column, options.timestamp_column} - {None}
        for column in special:
            if column not in schema.names:
                msg = f"option naming column {column!r}: the DataFrame has no such column"
                raise CassandraSchemaError(msg)
        self.columns = [n for n in schema.names if n not in special]
        self.batch_timestamp = batch_timestamp and options.timestamp_column is None

    def text(self) -> str:
        """The CQL every row is bound to."""
        o = self.options
        names = ", ".join(f'"{c}"' for c in self.columns)
        markers = ", ".join("?" for _ in self.columns)
        using = []
        if o.ttl is not None:
            using.append(f"TTL {o.ttl}")
        if o.ttl_column is not None:
            using.append("TTL ?")
        if o.timestamp_column is not None or self.batch_timestamp:
            using.append("TIMESTAMP ?")
        suffix = f" USING {' AND '.join(using)}" if using else ""
        return f'INSERT INTO "{o.keyspace}"."{o.table}" ({names}) VALUES ({markers}){suffix}'

    def prepare(self, session: Any) -> Any:
        """Prepare on ``session``; a table, column or type that does not fit names the column."""
        from cassandra import InvalidRequest

        o = self.options
        try:
            prepared = session.prepare(self.text())
        except InvalidRequest as exc:
            target = f"{o.keyspace}.{o.table}"
            msg = f"firesteel.cassandra: table {target} does not take this DataFrame: {exc}"
            raise CassandraSchemaError(msg) from exc
        prepared.is_idempotent = True
        for column in prepared.column_metadata:
            if column.name not in self.schema.names:
                continue
            cql_type = column.type.cql_parameterized_type()
            arrow_type = self.schema.field(column.name).type
            if not arrow_fits_cql(arrow_type, cql_type):
                msg = (
                    f"firesteel.cassandra: column {column.name!r} is {arrow_type} in the DataFrame "
                    f"but {cql_type} in {o.keyspace}.{o.table}"
                )
                raise CassandraSchemaError(msg)
        return prepared

    def execute(
        self,
        session: Any,
        prepared: Any,
        batches: Iterable[pa.RecordBatch],
        where: str,
        timestamp_us: int | None = None,
    ) -> int:
        """Send every row with at most ``max.in.flight`` requests outstanding; the row count.

        Raises on the first failed write (the driver already retried it where
        its retry policy allows), so the caller's batch fails and is re-run.
        """
        from cassandra.concurrent import execute_concurrent, execute_concurrent_with_args

        converters = self._converters(prepared)
        count = 0
        for batch in batches:
            params = [self._bind(row, converters, where, timestamp_us) for row in batch.to_pylist()]
            if self.options.batch == "partition":
                execute_concurrent(
                    session,
                    list(self._grouped(prepared, params)),
                    concurrency=self.options.max_in_flight,
                )
            else:
                execute_concurrent_with_args(
                    session, prepared, params, concurrency=self.options.max_in_flight
                )
            count += len(params)
        return count

    def _grouped(self, prepared: Any, params: list[list[Any]]) -> Iterator[tuple[Any, Any]]:
        """(statement, values) pairs: the rows of one partition key in UNLOGGED batches."""
        from cassandra.query import BatchStatement, BatchType

        indexes = prepared.routing_key_indexes
        if not indexes:
            # The cluster did not say which markers are the partition key: batching blind
            # could mix partitions, so every row goes alone.
            yield from ((prepared, values) for values in params)
            return
        groups: dict[tuple[Any, ...], list[list[Any]]] = {}
        for values in params:
            groups.setdefault(_partition_of(values, indexes), []).append(values)
        size = self.options.batch_rows
        for rows in groups.values():
            for start in range(0, len(rows), size):
                chunk = rows[start : start + size]
                if len(chunk) == 1:
                    yield prepared, chunk[0]
                    continue
                statement = BatchStatement(batch_type=BatchType.UNLOGGED)
                statement.is_idempotent = True
                for values in chunk:
                    statement.add(prepared, values)
                yield statement, None

    def _converters(self, prepared: Any) -> dict[str, Any]:
        types = {c.name: c.type.typename for c in prepared.column_metadata}
        return {c: uuid.UUID for c in self.columns if types.get(c) in ("uuid", "timeuuid")}

    def _bind(
        self, row: dict[str, Any], converters: dict[str, Any], where: str, timestamp_us: int | None
    ) -> list[Any]:
        from cassandra.query import UNSET_VALUE

        blank = None if self.options.nulls == "tombstone" else UNSET_VALUE
        values: list[Any] = []
        for column in self.columns:
            value = row[column]
            if value is None:
                values.append(blank)
            else:
                convert = converters.get(column)
                values.append(convert(value) if convert else value)
        o = self.options
        if o.ttl_column is not None:
            values.append(row[o.ttl_column] if row[o.ttl_column] is not None else UNSET_VALUE)
        if o.timestamp_column is not None:
            stamp = row[o.timestamp_column]
            if stamp is None:
                msg = (
                    f"firesteel.cassandra: {where}: column {o.timestamp_column!r} "
                    f"(option 'timestamp.column') is null in row {row!r}"
                )
                raise CassandraRecordError(msg)
            values.append(_micros(stamp))
        elif self.batch_timestamp:
            values.append(timestamp_us)
        return values
