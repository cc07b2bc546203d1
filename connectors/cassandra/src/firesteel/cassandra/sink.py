"""The upsert sink: idempotent INSERTs keyed by the table's primary key.

Every row of a task becomes one execution of a single prepared ``INSERT``
(columns mapped by name, marked idempotent so the driver may retry it), sent
through ``execute_concurrent_with_args`` with at most ``max.in.flight``
requests outstanding per task. A replay of batch N writes the same rows under
the same keys again, so with a resettable source the sink is exactly-once
(Table 8-1, column "idempotent"), with the temporary inconsistency of any
idempotent sink while a batch replays. A null column is sent as protocol-v4
UNSET (no tombstone) unless ``nulls=tombstone``.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Iterator
from typing import Any, ClassVar

import pyarrow as pa

from firesteel.cassandra.client import session_for
from firesteel.cassandra.errors import CassandraRecordError, CassandraSchemaError
from firesteel.cassandra.options import CassandraSinkOptions
from firesteel.core.context import TaskScope
from firesteel.core.sink import IdempotentSink

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


def _fits(arrow_type: pa.DataType, cql_type: str) -> bool:
    if pa.types.is_timestamp(arrow_type):
        return cql_type == "timestamp"
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        inner = cql_type.partition("<")[2].rstrip(">")
        return cql_type.startswith(("list<", "set<")) and _fits(arrow_type.value_type, inner)
    return cql_type in _FITS.get(str(arrow_type), ())


def _micros(value: Any) -> int:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return int(value.timestamp() * 1_000_000)
    return int(value)


class CassandraUpsertSink(IdempotentSink):
    """Upserts every row into ``keyspace.table``; see the module docs."""

    name: ClassVar[str] = "firesteel.cassandra"

    def __init__(self, options: CassandraSinkOptions, schema: pa.Schema, sink_id: str) -> None:
        self.options = options
        self.schema = schema
        self.sink_id = sink_id
        special = {options.ttl_column, options.timestamp_column} - {None}
        for column in special:
            if column not in schema.names:
                msg = f"option naming column {column!r}: the DataFrame has no such column"
                raise CassandraSchemaError(msg)
        self.columns = [n for n in schema.names if n not in special]

    def statement(self) -> str:
        """The INSERT every row is bound to."""
        o = self.options
        names = ", ".join(f'"{c}"' for c in self.columns)
        markers = ", ".join("?" for _ in self.columns)
        using = []
        if o.ttl is not None:
            using.append(f"TTL {o.ttl}")
        if o.ttl_column is not None:
            using.append("TTL ?")
        if o.timestamp_column is not None:
            using.append("TIMESTAMP ?")
        suffix = f" USING {' AND '.join(using)}" if using else ""
        return f'INSERT INTO "{o.keyspace}"."{o.table}" ({names}) VALUES ({markers}){suffix}'

    def _prepare(self, session: Any) -> Any:
        from cassandra import InvalidRequest

        o = self.options
        try:
            prepared = session.prepare(self.statement())
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
            if not _fits(arrow_type, cql_type):
                msg = (
                    f"firesteel.cassandra: column {column.name!r} is {arrow_type} in the DataFrame "
                    f"but {cql_type} in {o.keyspace}.{o.table}"
                )
                raise CassandraSchemaError(msg)
        return prepared

    def prepare(self) -> None:
        """Check up front that the keyspace, table and every column fit."""
        self._prepare(session_for(self.options))

    def write(self, scope: TaskScope, batches: Iterator[pa.RecordBatch]) -> int:
        from cassandra.concurrent import execute_concurrent_with_args

        session = session_for(self.options)
        prepared = self._prepare(session)
        converters = self._converters(prepared)
        count = 0
        for batch in batches:
            params = [self._bind(row, converters, scope) for row in batch.to_pylist()]
            execute_concurrent_with_args(
                session, prepared, params, concurrency=self.options.max_in_flight
            )
            count += len(params)
        return count

    def _converters(self, prepared: Any) -> dict[str, Any]:
        types = {c.name: c.type.typename for c in prepared.column_metadata}
        return {c: uuid.UUID for c in self.columns if types.get(c) in ("uuid", "timeuuid")}

    def _bind(self, row: dict[str, Any], converters: dict[str, Any], scope: TaskScope) -> list[Any]:
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
                    f"firesteel.cassandra: batch {scope.batch_id} partition {scope.partition_id}: "
                    f"column {o.timestamp_column!r} (option 'timestamp.column') is null "
                    f"in row {row!r}"
                )
                raise CassandraRecordError(msg)
            values.append(_micros(stamp))
        return values
