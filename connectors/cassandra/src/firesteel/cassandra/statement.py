"""The prepared statement both Cassandra sinks bind rows to, and its checks against the table.

Columns are mapped by name; the statement is marked idempotent so the
driver's retry policy may retry it. A null column is sent as protocol-v4
UNSET (no tombstone) unless ``nulls=tombstone``. ``ttl`` / ``ttl.column`` add
``USING TTL``; the write timestamp comes from ``timestamp.column`` or, for the
write-ahead-log sink, from the batch (``USING TIMESTAMP ?`` either way).

``write=increment`` (counter tables, ``mode=wal`` only) binds rows to
``UPDATE t SET c = c + ? ... WHERE <key> = ?`` instead: the table's column
types say which columns are counters, and in a counter table every other
column is part of the primary key. A null delta adds 0. Such an update is
not idempotent, so it is not marked so: the driver never retries it on its
own, and a failed write fails the send (the write-ahead log re-sends the
segment, the at-least-once window of :mod:`firesteel.cassandra.wal`).

``write=append`` binds rows to ``UPDATE t [USING ...] SET l = l + ?, ... WHERE
<key> = ?``: every list, set or map column of the DataFrame is appended to (a
list gains the elements in order, a set their union, a map the entries, each
replacing the entry of the same key); the DataFrame's other columns are the
primary key, which the WHERE clause names whole (Cassandra refuses a regular
column there, naming it). A null collection appends nothing. A set union or
a map put repeated changes nothing, so it is idempotent and allowed in either
mode; a list append repeated appends again (Cassandra names each element by a
fresh timeuuid), so it is not idempotent: appending to a list needs
``mode=wal`` and is never retried or re-sent by the sink, as increments.
A Spark ``MapType`` column is bound to a ``map<k, v>`` column, whole (an
INSERT replaces the map) or entry by entry (``write=append``).

Backoff: the driver retries an idempotent write at once (see
:class:`~firesteel.cassandra.client.IdempotentRetryPolicy`), which covers a
timeout, not an outage. When writes still fail, the rows from the first
failed one on are sent again after a pause (:class:`~firesteel.cassandra.client.Backoff`:
0.1 s, doubling, at most 5 s) until ``retry.timeout.ms`` has passed; then the
last error fails the task (Spark re-runs the batch; the write-ahead log keeps
its segment). The suffix, not only the failed rows, is re-sent so that rows
with the same key keep their order: the driver stamps each send anew.
Counter increments are never re-sent this way.

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

import logging
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from firesteel.cassandra.client import Backoff
from firesteel.cassandra.errors import CassandraRecordError, CassandraSchemaError
from firesteel.cassandra.options import CassandraSinkOptions
from firesteel.core.toolkit import MICROS, to_epoch

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


def map_types(cql_type: str) -> tuple[str, str]:
    """The key and value types of ``map<k, v>`` as the driver spells it."""
    key, _, value = cql_type[len("map<") : -1].partition(",")
    return key.strip(), value.strip()


def arrow_fits_cql(arrow_type: pa.DataType, cql_type: str) -> bool:
    """True when values of ``arrow_type`` can be bound to a ``cql_type`` column."""
    if pa.types.is_timestamp(arrow_type):
        return cql_type == "timestamp"
    if pa.types.is_map(arrow_type):
        if not cql_type.startswith("map<"):
            return False
        key, value = map_types(cql_type)
        return arrow_fits_cql(arrow_type.key_type, key) and arrow_fits_cql(
            arrow_type.item_type, value
        )
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


class RowStatement:
    """The INSERT (or counter or collection UPDATE) of ``schema``'s columns into ``keyspace.table``.

    See the module docs. ``batch_timestamp``: every row carries a write
    timestamp given per call (:meth:`execute`), unless ``timestamp.column``
    names a column for it (never for counters, which take no timestamp).
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
        self.frame_columns = [n for n in schema.names if n not in special]
        """The DataFrame's columns that are written (not ``ttl.column``/``timestamp.column``)."""
        self.columns = list(self.frame_columns)
        self.increment = options.write == "increment"
        self.update = options.write != "insert"
        self.key_columns: list[str] = []
        """``write=increment|append``: the columns of the WHERE clause, bound last."""
        self.added: set[str] = set()
        """``write=increment|append``: the columns set to ``c = c + ?``."""
        self.idempotent = not self.increment
        """False for counters and list appends: the driver and the sink never re-send them."""
        self.batch_timestamp = (
            batch_timestamp and options.timestamp_column is None and not self.increment
        )

    def text(self) -> str:
        """The CQL every row is bound to."""
        o = self.options
        using = []
        if o.ttl is not None:
            using.append(f"TTL {o.ttl}")
        if o.ttl_column is not None:
            using.append("TTL ?")
        if o.timestamp_column is not None or self.batch_timestamp:
            using.append("TIMESTAMP ?")
        suffix = f" USING {' AND '.join(using)}" if using else ""
        target = f'"{o.keyspace}"."{o.table}"'
        if self.update:
            sets = ", ".join(
                f'"{c}" = "{c}" + ?' if c in self.added else f'"{c}" = ?' for c in self.columns
            )
            where = " AND ".join(f'"{c}" = ?' for c in self.key_columns)
            return f"UPDATE {target}{suffix} SET {sets} WHERE {where}"
        names = ", ".join(f'"{c}"' for c in self.columns)
        markers = ", ".join("?" for _ in self.columns)
        return f"INSERT INTO {target} ({names}) VALUES ({markers}){suffix}"

    def prepare(self, session: Any) -> Any:
        """Prepare on ``session``; a table, column or type that does not fit names the column."""
        from cassandra import InvalidRequest

        o = self.options
        target = f"{o.keyspace}.{o.table}"
        try:
            if self.increment:
                self._split_counters(session)
            elif self.update:
                self._split_collections(session)
            prepared = session.prepare(self.text())
        except InvalidRequest as exc:
            counters = [] if self.increment else self._counters_written(session)
            if counters:
                msg = (
                    f"firesteel.cassandra: column {counters[0]!r} of {target} is a counter, "
                    "which takes increments, not values: write it with write=increment "
                    "and mode=wal"
                )
                raise CassandraSchemaError(msg) from exc
            msg = f"firesteel.cassandra: table {target} does not take this DataFrame: {exc}"
            raise CassandraSchemaError(msg) from exc
        prepared.is_idempotent = self.idempotent
        for column in prepared.column_metadata:
            if column.name not in self.schema.names:
                continue
            cql_type = column.type.cql_parameterized_type()
            arrow_type = self.schema.field(column.name).type
            if cql_type == "counter" and pa.types.is_integer(arrow_type):
                continue
            if not arrow_fits_cql(arrow_type, cql_type):
                msg = (
                    f"firesteel.cassandra: column {column.name!r} is {arrow_type} in the DataFrame "
                    f"but {cql_type} in {o.keyspace}.{o.table}"
                )
                raise CassandraSchemaError(msg)
        return prepared

    def _column_types(self, session: Any) -> dict[str, str]:
        """The table's columns and their CQL type names, from a prepared ``SELECT *``."""
        o = self.options
        metadata = session.prepare(f'SELECT * FROM "{o.keyspace}"."{o.table}"').result_metadata
        return {entry[2]: entry[3].typename for entry in metadata}

    def _check_written(self, types: dict[str, str]) -> None:
        """Every written column is one of the table's (``types``), or an error names it."""
        target = f"{self.options.keyspace}.{self.options.table}"
        for name in self.frame_columns:
            if name not in types:
                msg = f"firesteel.cassandra: column {name!r} is not a column of {target}"
                raise CassandraSchemaError(msg)

    def _counters_written(self, session: Any) -> list[str]:
        """The DataFrame's columns that are counters in the table (none if it cannot be read)."""
        from cassandra import InvalidRequest

        try:
            types = self._column_types(session)
        except InvalidRequest:
            return []
        return [c for c in self.columns if types.get(c) == "counter"]

    def _split_counters(self, session: Any) -> None:
        """Sort the DataFrame's columns into counter deltas and key columns, from the table."""
        o = self.options
        target = f"{o.keyspace}.{o.table}"
        types = self._column_types(session)
        counters = {name for name, typename in types.items() if typename == "counter"}
        if not counters:
            msg = f"firesteel.cassandra: write=increment needs a counter table; {target} has none"
            raise CassandraSchemaError(msg)
        self._check_written(types)
        keys = [name for name in types if name not in counters]
        missing = [name for name in keys if name not in self.schema.names]
        if missing:
            msg = (
                f"firesteel.cassandra: primary-key column {missing[0]!r} of {target} is "
                "missing from the DataFrame"
            )
            raise CassandraSchemaError(msg)
        self.columns = [n for n in self.frame_columns if n in counters]
        self.added = set(self.columns)
        self.key_columns = keys

    def _split_collections(self, session: Any) -> None:
        """``write=append``: the DataFrame's list, set and map columns are appended to,
        the rest is the primary key; a list append is refused outside ``mode=wal``."""
        o = self.options
        target = f"{o.keyspace}.{o.table}"
        types = self._column_types(session)
        self._check_written(types)
        added = [c for c in self.frame_columns if types[c] in ("list", "set", "map")]
        if not added:
            msg = (
                "firesteel.cassandra: write=append needs a list, set or map column in the "
                "DataFrame; "
                f"none of {self.frame_columns} is one in {target}"
            )
            raise CassandraSchemaError(msg)
        lists = [c for c in added if types[c] == "list"]
        if lists and o.mode != "wal":
            msg = (
                f"firesteel.cassandra: column {lists[0]!r} of {target} is a list: appending "
                "to a list again appends again, and mode=upsert replays batches after a crash. "
                "Use mode=wal (at-least-once), or a set column (a union repeated is harmless)"
            )
            raise CassandraSchemaError(msg)
        self.idempotent = not lists
        self.added = set(added)
        self.key_columns = [c for c in self.frame_columns if c not in self.added]
        self.columns = added

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
        converters = self._converters(prepared)
        count = 0
        for batch in batches:
            params = [self._bind(row, converters, where, timestamp_us) for row in batch.to_pylist()]
            if self.options.batch == "partition":
                self._send(session, list(self._grouped(prepared, params)), where)
            else:
                self._send(session, [(prepared, values) for values in params], where)
            count += len(params)
        return count

    def _send(self, session: Any, statements: list[tuple[Any, Any]], where: str) -> None:
        """Execute every (statement, values) pair, re-sending failures with backoff."""
        from cassandra.concurrent import execute_concurrent

        backoff = Backoff(self.options.retry_timeout_ms / 1000)
        while True:
            results = execute_concurrent(
                session,
                statements,
                concurrency=self.options.max_in_flight,
                raise_on_first_error=False,
            )
            first = next((i for i, (ok, _) in enumerate(results) if not ok), None)
            if first is None:
                return
            error = results[first][1]
            failed = sum(1 for ok, _ in results if not ok)
            what = f"{where}: {failed} of {len(statements)} writes (re-sent from the first)"
            if not self.idempotent or not backoff.pause(what, error):
                raise error
            statements = statements[first:]

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
                kind = BatchType.COUNTER if self.increment else BatchType.UNLOGGED
                statement = BatchStatement(batch_type=kind)
                statement.is_idempotent = self.idempotent
                for values in chunk:
                    statement.add(prepared, values)
                yield statement, None

    def _converters(self, prepared: Any) -> dict[str, Any]:
        """Per column, what turns Arrow's Python value into the driver's: a uuid from its
        text, a dict from a map's ``(key, value)`` pairs."""
        types = {c.name: c.type.typename for c in prepared.column_metadata}
        converters: dict[str, Any] = {}
        for column in [*self.columns, *self.key_columns]:
            if types.get(column) in ("uuid", "timeuuid"):
                converters[column] = uuid.UUID
            elif types.get(column) == "map":
                converters[column] = dict
        return converters

    def _bind(
        self, row: dict[str, Any], converters: dict[str, Any], where: str, timestamp_us: int | None
    ) -> list[Any]:
        from cassandra.query import UNSET_VALUE

        blank = None if self.options.nulls == "tombstone" else UNSET_VALUE
        if self.increment:
            # A null delta adds nothing; the key follows the deltas, as in the UPDATE's text.
            return [row[c] or 0 for c in self.columns] + [
                self._value(row[c], converters.get(c), UNSET_VALUE) for c in self.key_columns
            ]
        values = [
            self._value(row[c], converters.get(c), UNSET_VALUE if c in self.added else blank)
            for c in self.columns
        ]
        using = self._using(row, where, timestamp_us)
        if self.update:
            # USING comes before SET in an UPDATE, and the key after it.
            keys = [self._value(row[c], converters.get(c), UNSET_VALUE) for c in self.key_columns]
            return using + values + keys
        return values + using

    def _using(self, row: dict[str, Any], where: str, timestamp_us: int | None) -> list[Any]:
        """The values of the ``USING TTL ? AND TIMESTAMP ?`` markers, in that order."""
        from cassandra.query import UNSET_VALUE

        o = self.options
        values: list[Any] = []
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
            values.append(to_epoch(stamp, MICROS))
        elif self.batch_timestamp:
            values.append(timestamp_us)
        return values

    @staticmethod
    def _value(value: Any, convert: Any, blank: Any) -> Any:
        if value is None:
            return blank
        return convert(value) if convert else value
