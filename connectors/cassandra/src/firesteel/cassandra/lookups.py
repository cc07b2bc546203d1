"""Async lookups (the book's AsyncFunction, chapter 8): enrich rows with a Cassandra row by key.

:func:`lookup` adds the ``columns`` of the row of ``keyspace.table`` whose
``on`` columns equal the DataFrame row's, to a streaming or a batch DataFrame.
It is a ``mapInArrow`` stage: each task sends the SELECTs of one Arrow record
batch through the driver's async API with at most ``max_in_flight`` requests
outstanding, and emits the batch in its input order once every answer is in
(Flink's ordered async I/O: the batch is the ordering window).

A lookup reads, it writes nothing, so it adds no delivery guarantee of its
own: a replayed micro-batch looks its keys up again and may see newer values.

Decisions where a user might expect otherwise:

* ``on`` names columns that exist under the same name in the DataFrame and the
  table; rename a DataFrame column first if they differ. A looked-up column
  whose name the DataFrame already has is refused (no silent shadowing).
* When ``on`` covers only part of the primary key, the first row in the
  table's clustering order is taken (``LIMIT 1``).
* A row with a null key is not looked up: it counts as missing.
* ``missing="null"`` keeps a row without a match, its looked-up columns null;
  ``missing="drop"`` drops it.
* A lookup that fails with an error a later attempt may cure (timeout,
  unavailable or overloaded replicas, no reachable host) is sent again, with
  the sinks' backoff (0.1 s doubling to 5 s), for ``retry_timeout`` seconds.
* ``on_error="fail"`` then fails the task on the first failed lookup naming
  the table and key, and Spark retries or fails the query; nothing is
  dropped. ``on_error="null"`` nulls that row's looked-up columns and sets
  ``error_column`` to the error text, so the failures can be counted
  (``df.filter(F.col("lookup_error").isNotNull())``) or routed elsewhere;
  each task also logs how many of its lookups failed.
* Output column types come from the prepared SELECT's result metadata, so
  they need no schema tables: text-like types and uuid/inet become strings,
  timestamp becomes a UTC timestamp, list/set become arrays.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from firesteel.cassandra.client import Backoff, retriable_errors, session_for
from firesteel.cassandra.errors import CassandraLookupError, CassandraSchemaError
from firesteel.cassandra.options import CONSISTENCY_LEVELS, PASSTHROUGH
from firesteel.cassandra.statement import arrow_fits_cql, map_types
from firesteel.core.spi import ConfigError
from firesteel.core.toolkit import WorkerCache

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

logger = logging.getLogger(__name__)

_ARROW: dict[str, pa.DataType] = {
    "ascii": pa.string(),
    "text": pa.string(),
    "varchar": pa.string(),
    "inet": pa.string(),
    "uuid": pa.string(),
    "timeuuid": pa.string(),
    "tinyint": pa.int8(),
    "smallint": pa.int16(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "counter": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "blob": pa.binary(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "date": pa.date32(),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class LookupSpec:
    """Everything a task needs to look rows up; see :func:`lookup` for the fields."""

    contact_points: str
    keyspace: str
    table: str
    on: tuple[str, ...]
    columns: tuple[str, ...]
    port: int = 9042
    local_dc: str | None = None
    consistency: str = "local_one"
    max_in_flight: int = 10
    timeout: float = 5.0
    retry_timeout: float = 30.0
    missing: Literal["null", "drop"] = "null"
    on_error: Literal["fail", "null"] = "fail"
    error_column: str = "lookup_error"
    passthrough: dict[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        checks = [
            (not self.on, "'on' must name at least one key column"),
            (not self.columns, "'columns' must name at least one column to add"),
            (self.max_in_flight < 1, f"'max_in_flight' must be at least 1: {self.max_in_flight}"),
            (self.timeout <= 0, f"'timeout' must be a positive number of seconds: {self.timeout}"),
            (self.retry_timeout < 0, f"'retry_timeout' must be 0 or more: {self.retry_timeout}"),
            (self.missing not in ("null", "drop"), f"'missing' is null or drop: {self.missing!r}"),
            (
                self.on_error not in ("fail", "null"),
                f"'on_error' is fail or null: {self.on_error!r}",
            ),
            (
                self.consistency.lower() not in CONSISTENCY_LEVELS,
                f"'consistency' {self.consistency!r} is not one of {', '.join(CONSISTENCY_LEVELS)}",
            ),
        ]
        for failed, problem in checks:
            if failed:
                msg = f"firesteel.cassandra.lookup: {problem}"
                raise ConfigError(msg)
        stray = [k for k in self.passthrough if not k.lower().startswith(PASSTHROUGH)]
        if stray:
            msg = f"firesteel.cassandra.lookup: options {stray} are not cassandra.* options"
            raise ConfigError(msg)

    @property
    def hosts(self) -> list[str]:
        """The contact points as a list."""
        return [h.strip() for h in self.contact_points.split(",") if h.strip()]

    @property
    def target(self) -> str:
        """``keyspace.table``, for messages."""
        return f"{self.keyspace}.{self.table}"

    def select(self) -> str:
        """The SELECT every key is bound to."""
        wanted = ", ".join(f'"{c}"' for c in self.columns)
        where = " AND ".join(f'"{k}" = ?' for k in self.on)
        return f'SELECT {wanted} FROM "{self.keyspace}"."{self.table}" WHERE {where} LIMIT 1'


def lookup(
    df: DataFrame,
    *,
    contact_points: str,
    keyspace: str,
    table: str,
    on: Sequence[str],
    columns: Sequence[str],
    port: int = 9042,
    local_dc: str | None = None,
    consistency: str = "local_one",
    max_in_flight: int = 10,
    timeout: float = 5.0,
    retry_timeout: float = 30.0,
    missing: Literal["null", "drop"] = "null",
    on_error: Literal["fail", "null"] = "fail",
    error_column: str = "lookup_error",
    options: Mapping[str, str] | None = None,
) -> DataFrame:
    """``df`` with ``columns`` of the ``keyspace.table`` row matching its ``on`` columns.

    ``max_in_flight`` bounds the concurrent SELECTs per task, ``timeout`` each
    one (seconds); lookups that still fail with a timeout, an unavailable or
    overloaded replica or no reachable host are sent again with backoff for
    ``retry_timeout`` seconds before the failure policy applies (0: at once);
    ``options`` passes ``cassandra.username`` / ``cassandra.password`` /
    ``cassandra.connect.timeout``. The table, the
    columns and the key types are checked here, on the driver, before any task
    runs: a mismatch raises :class:`CassandraSchemaError` naming the column,
    an unreachable cluster :class:`CassandraUnreachableError` naming the hosts.
    See the module docs for the missing-row and failure policies.
    """
    spec = LookupSpec(
        contact_points=contact_points,
        keyspace=keyspace,
        table=table,
        on=tuple(on),
        columns=tuple(columns),
        port=port,
        local_dc=local_dc,
        consistency=consistency,
        max_in_flight=max_in_flight,
        timeout=timeout,
        retry_timeout=retry_timeout,
        missing=missing,
        on_error=on_error,
        error_column=error_column,
        passthrough=dict(options or {}),
    )
    from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema
    from pyspark.sql.types import StringType, StructField, StructType

    absent = [k for k in spec.on if k not in df.columns]
    if absent:
        msg = f"firesteel.cassandra.lookup: key columns {absent} are not in the DataFrame"
        raise CassandraSchemaError(msg)
    added = list(spec.columns) + ([spec.error_column] if spec.on_error == "null" else [])
    clash = [c for c in added if c in df.columns]
    if clash:
        msg = (
            f"firesteel.cassandra.lookup: the DataFrame already has columns {clash}; "
            "rename them first (withColumnRenamed) or choose another error_column"
        )
        raise CassandraSchemaError(msg)
    key_types = to_arrow_schema(df.select(*spec.on).schema)
    out_types = _check(spec, key_types, _prepare(session_for(spec), spec))
    fields = list(df.schema.fields) + [
        StructField(name, from_arrow_type(out_types[name]), True) for name in spec.columns
    ]
    if spec.on_error == "null":
        fields.append(StructField(spec.error_column, StringType(), True))
    return df.mapInArrow(partial(_enrich_partition, spec, out_types), StructType(fields))


def _prepare(session: Any, spec: LookupSpec) -> Any:
    from cassandra import InvalidRequest

    try:
        prepared = session.prepare(spec.select())
    except InvalidRequest as exc:
        msg = f"firesteel.cassandra.lookup: cannot look up {spec.columns} in {spec.target}: {exc}"
        raise CassandraSchemaError(msg) from exc
    prepared.is_idempotent = True
    return prepared


def _check(spec: LookupSpec, key_types: pa.Schema, prepared: Any) -> dict[str, pa.DataType]:
    """Check the key types against the table's; the Arrow type of each looked-up column."""
    for column in prepared.column_metadata:
        cql_type = column.type.cql_parameterized_type()
        arrow_type = key_types.field(column.name).type
        if not arrow_fits_cql(arrow_type, cql_type):
            msg = (
                f"firesteel.cassandra.lookup: key column {column.name!r} is {arrow_type} in the "
                f"DataFrame but {cql_type} in {spec.target}"
            )
            raise CassandraSchemaError(msg)
    return {
        name: _arrow_type(spec, name, cql_type.cql_parameterized_type())
        for _, _, name, cql_type in prepared.result_metadata
    }


def _arrow_type(spec: LookupSpec, column: str, cql_type: str) -> pa.DataType:
    if cql_type.startswith(("list<", "set<")):
        return pa.list_(_arrow_type(spec, column, cql_type.partition("<")[2].rstrip(">")))
    if cql_type.startswith("map<"):
        key, value = map_types(cql_type)
        return pa.map_(_arrow_type(spec, column, key), _arrow_type(spec, column, value))
    if cql_type not in _ARROW:
        msg = f"firesteel.cassandra.lookup: column {column!r} of {spec.target} is {cql_type}, "
        msg += f"which lookups do not read; supported: {', '.join(_ARROW)}, list, set, map"
        raise CassandraSchemaError(msg)
    return _ARROW[cql_type]


_prepared: WorkerCache[tuple[int, str], tuple[Any, str]] = WorkerCache()


def _prepared_for(session: Any, spec: LookupSpec) -> tuple[Any, str]:
    """The prepared SELECT and the execution profile (timeout, consistency), once per worker.

    The profile keeps the session's retry policy: the SELECT is idempotent, so an
    overloaded coordinator or a broken connection is retried like the sinks' writes.
    """
    from cassandra import ConsistencyLevel
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, ExecutionProfile
    from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy

    def create() -> tuple[Any, str]:
        name = f"firesteel.lookup.{len(_prepared)}"
        profile = ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=spec.local_dc)),
            consistency_level=ConsistencyLevel.name_to_value[spec.consistency.upper()],
            request_timeout=spec.timeout,
            retry_policy=session.get_execution_profile(EXEC_PROFILE_DEFAULT).retry_policy,
        )
        session.cluster.add_execution_profile(name, profile)
        return _prepare(session, spec), name

    key = (id(session), f"{spec.select()}|{spec.consistency}|{spec.timeout}")
    return _prepared.get(key, create)


class Lookups:
    """The lookups of one Python worker: its session, prepared SELECT and profile."""

    def __init__(self, spec: LookupSpec, out_types: Mapping[str, pa.DataType], session: Any):
        self.spec = spec
        self.out_types = out_types
        self.session = session
        self.prepared, self.profile = _prepared_for(session, spec)
        self.bind = {
            c.name: uuid.UUID
            for c in self.prepared.column_metadata
            if c.type.typename in ("uuid", "timeuuid")
        }

    def enrich(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with its looked-up columns, rows in input order (see the module docs)."""
        spec = self.spec
        keys = list(zip(*(batch.column(k).to_pylist() for k in spec.on), strict=True))
        asked = [i for i, key in enumerate(keys) if None not in key]
        found: list[tuple[Any, ...] | None] = [None] * batch.num_rows
        errors: list[str | None] = [None] * batch.num_rows
        for i, (ok, answer) in zip(asked, self._send([keys[i] for i in asked]), strict=True):
            if ok:
                found[i] = next(iter(answer), None)
            elif spec.on_error == "fail":
                where = " AND ".join(f"{k} = {v!r}" for k, v in zip(spec.on, keys[i], strict=True))
                msg = f"firesteel.cassandra.lookup: {spec.target} WHERE {where} failed: {answer!r}"
                raise CassandraLookupError(msg) from answer
            else:
                errors[i] = f"{type(answer).__name__}: {answer}"
        failed = [e for e in errors if e is not None]
        if failed:
            logger.warning(
                "firesteel.cassandra.lookup: %d of %d lookups in %s failed (nulls set); first: %s",
                len(failed),
                len(asked),
                spec.target,
                failed[0],
            )
        arrays = list(batch.columns)
        for position, name in enumerate(spec.columns):
            values = [None if row is None else _plain(row[position]) for row in found]
            arrays.append(pa.array(values, type=self.out_types[name]))
        names = list(batch.schema.names) + list(spec.columns)
        if spec.on_error == "null":
            arrays.append(pa.array(errors, type=pa.string()))
            names.append(spec.error_column)
        out = pa.RecordBatch.from_arrays(arrays, names=names)
        if spec.missing == "drop":
            out = out.filter(pa.array([row is not None for row in found]))
        return out

    def _send(self, keys: list[tuple[Any, ...]]) -> list[tuple[bool, Any]]:
        """(ok, rows or error) per key; retriable failures are sent again with backoff."""
        results = self._execute(keys)
        backoff = Backoff(self.spec.retry_timeout)
        retriable = retriable_errors()
        while True:
            failed = [i for i, (ok, a) in enumerate(results) if not ok and isinstance(a, retriable)]
            what = f"{len(failed)} of {len(keys)} lookups in {self.spec.target}"
            if not failed or not backoff.pause(what, results[failed[0]][1]):
                return results
            for i, result in zip(failed, self._execute([keys[i] for i in failed]), strict=True):
                results[i] = result

    def _execute(self, keys: list[tuple[Any, ...]]) -> list[tuple[bool, Any]]:
        from cassandra.concurrent import execute_concurrent_with_args

        params = [
            [
                self.bind[k](v) if k in self.bind else v
                for k, v in zip(self.spec.on, key, strict=True)
            ]
            for key in keys
        ]
        return list(
            execute_concurrent_with_args(
                self.session,
                self.prepared,
                params,
                concurrency=self.spec.max_in_flight,
                raise_on_first_error=False,
                execution_profile=self.profile,
            )
        )


def _enrich_partition(
    spec: LookupSpec, out_types: dict[str, pa.DataType], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    lookups = Lookups(spec, out_types, session_for(spec))
    for batch in batches:
        yield lookups.enrich(batch)


def _plain(value: Any) -> Any:
    """A driver value as Arrow takes it: uuids as text, sets as lists, maps as their
    ``(key, value)`` pairs, dates as dates."""
    from cassandra.util import Date, SortedSet

    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (set, frozenset, SortedSet)):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return [(_plain(key), _plain(item)) for key, item in value.items()]
    if isinstance(value, Date):
        return value.date()
    return value
