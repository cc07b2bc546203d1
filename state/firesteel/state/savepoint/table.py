"""Writing state as a table: bootstrap a savepoint from a DataFrame, or rewrite some keys.

The input is a Spark DataFrame (or several, e.g. one per state when their values'
types differ) with the operator's key columns and::

    state     string   the state's name (one of ``states``)
    value     any      the value (a map entry's value; one list element per row);
                       null deletes the entry in :func:`rewrite`
    user_key  any      only for map states: the entry's key (optional column)

Spark computes each key's key group exactly as the stateful operator does
(``pmod(hash(key columns), max_parallelism)``); the rows are then collected on
the driver, encoded with each state's serializer and written as a savepoint
(:mod:`firesteel.state.savepoint.format`) that a job starts from with
``stateful(..., restore_from=<target>)``. Lists take their elements in the
order the DataFrame gives them. Each state's kind, serializer and type are
recorded from its descriptor, as a checkpoint records them, so a restore checks
them; a rewritten state keeps those of the savepoint (another is refused).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from firesteel.core.spi import ConfigError
from firesteel.core.toolkit import StorageConfig
from firesteel.state import keygroups
from firesteel.state.descriptors import StateDescriptor, StateKind
from firesteel.state.savepoint.format import (
    ROWS_SCHEMA,
    OperatorRows,
    Savepoint,
    open_savepoint,
    write_savepoint,
)
from firesteel.state.schemas import recorded, unchanged
from firesteel.state.serializers import check_serializer, pack, pack_key

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_KEY_GROUP = "__firesteel_key_group"


def _describe(states: Sequence[StateDescriptor]) -> dict[str, dict[str, Any]]:
    """Each state's record, as a checkpoint's: kind, serializer and the type of its values."""
    return {
        d.name: {
            "kind": d.kind.value,
            "serializer": d.value_serializer.name,
            "schema": recorded(d.schema),
        }
        for d in states
    }


def _check_rewritten(source: str, info: dict[str, Any], desc: StateDescriptor) -> None:
    """A state rewritten in place keeps its kind, serializer and type: the rows kept beside
    the new ones were written with them, and one state holds one type."""
    if info["kind"] != desc.kind.value:
        msg = (
            f"rewrite: state '{desc.name}' is a {info['kind']} state in savepoint {source}, "
            f"not {desc.kind.value}"
        )
        raise ConfigError(msg)
    check_serializer(desc.name, desc.value_serializer, info["serializer"], f"rewrite: {source}")
    stored = info.get("schema")
    if not unchanged(stored, desc.schema):
        msg = (
            f"rewrite: state '{desc.name}' is recorded as {stored} in savepoint {source} and "
            f"its descriptor declares {recorded(desc.schema)}; the rows not rewritten keep the "
            "recorded type, so rewrite with it (the job restoring the savepoint may declare the "
            "new type: its values evolve as they load)"
        )
        raise ConfigError(msg)


def _encode(
    frames: DataFrame | Sequence[DataFrame],
    key: Sequence[str],
    states: Sequence[StateDescriptor],
    max_parallelism: int,
) -> pa.Table:
    """The DataFrames' rows as savepoint rows (a null value kept as a null ``value``)."""
    if isinstance(frames, Sequence):
        tables = [_encode(df, key, states, max_parallelism) for df in frames]
        return pa.concat_tables(tables) if tables else ROWS_SCHEMA.empty_table()
    df = frames
    missing = [c for c in (*key, "state", "value") if c not in df.columns]
    if missing:
        msg = f"state table: column '{missing[0]}' is missing (it has {', '.join(df.columns)})"
        raise ConfigError(msg)
    by_name = {d.name: d for d in states}
    with_groups = df.withColumn(_KEY_GROUP, keygroups.key_group_column(key, max_parallelism))
    table = with_groups.toArrow()
    keys = zip(*(table.column(c).to_pylist() for c in key), strict=True)
    has_user_key = "user_key" in table.column_names
    user_keys = table.column("user_key").to_pylist() if has_user_key else [None] * table.num_rows
    columns: dict[str, list[Any]] = {name: [] for name in ROWS_SCHEMA.names}
    for key_values, key_group, state, value, user_key in zip(
        keys,
        table.column(_KEY_GROUP).to_pylist(),
        table.column("state").to_pylist(),
        table.column("value").to_pylist(),
        user_keys,
        strict=True,
    ):
        desc = by_name.get(state)
        if desc is None:
            msg = f"state table: state {state!r} is not one of {sorted(by_name)}; declare it"
            raise ConfigError(msg)
        if desc.kind is StateKind.MAP and user_key is None:
            msg = f"state table: map state '{state}' needs a user_key column value"
            raise ConfigError(msg)
        columns["key_group"].append(key_group)
        columns["key"].append(pack_key(tuple(key_values)))
        columns["state"].append(state)
        columns["user_key"].append(pack(user_key) if desc.kind is StateKind.MAP else None)
        columns["value"].append(None if value is None else desc.value_serializer.dumps(value))
        columns["expires_ms"].append(None)
    return pa.table(columns, schema=ROWS_SCHEMA)


def _ordered(rows: pa.Table) -> pa.Table:
    """Rows by key group, keeping their order otherwise (Arrow's sort is stable)."""
    return rows.take(pc.sort_indices(rows, sort_keys=[("key_group", "ascending")]))


def bootstrap(
    df: DataFrame | Sequence[DataFrame],
    target: str,
    *,
    operator: str,
    key: Sequence[str],
    states: Sequence[StateDescriptor],
    max_parallelism: int = keygroups.DEFAULT_MAX_PARALLELISM,
    storage: StorageConfig | None = None,
) -> Savepoint:
    """Write at ``target`` a savepoint of operator ``operator`` whose state is ``df``'s rows
    (see module docs); a job starts from it with ``restore_from=target``."""
    keygroups.validate(1, max_parallelism)
    rows = _encode(df, key, states, max_parallelism)
    part = OperatorRows(
        key_columns=list(key),
        max_parallelism=max_parallelism,
        states=_describe(states),
        rows=_ordered(rows.filter(pc.is_valid(rows.column("value")))),
    )
    return write_savepoint(
        target,
        batch=-1,
        operators={operator: part},
        offsets=None,
        origin={"bootstrap": True},
        storage=storage,
    )


def rewrite(
    source: str,
    df: DataFrame | Sequence[DataFrame],
    target: str,
    *,
    operator: str,
    states: Sequence[StateDescriptor],
    storage: StorageConfig | None = None,
) -> Savepoint:
    """Write at ``target`` a copy of the savepoint ``source`` in which every (key, state) of
    ``df`` holds ``df``'s rows instead (a null value removes it); everything else, the other
    operators and the source positions included, is copied as it is."""
    original = open_savepoint(source, storage)
    part = original.operator(operator)
    described = part.states
    for desc in states:
        if desc.name in described:
            _check_rewritten(source, described[desc.name], desc)
    # A state already recorded keeps its record (checked the same); new ones are added.
    described = {**_describe(states), **described}
    changes = _encode(df, part.key_columns, states, part.max_parallelism)
    replaced = {
        (key, state)
        for key, state in zip(
            changes.column("key").to_pylist(), changes.column("state").to_pylist(), strict=True
        )
    }
    kept = part.rows()
    keep = [
        (key, state) not in replaced
        for key, state in zip(
            kept.column("key").to_pylist(), kept.column("state").to_pylist(), strict=True
        )
    ]
    added = changes.filter(pc.is_valid(changes.column("value")))
    operators = {name: _copied(original, name) for name in original.operators if name != operator}
    operators[operator] = OperatorRows(
        key_columns=part.key_columns,
        max_parallelism=part.max_parallelism,
        states=described,
        rows=_ordered(pa.concat_tables([kept.filter(pa.array(keep, pa.bool_())), added])),
        processing_time=part.processing_time,
        written_by=part.info.get("written_by"),
    )
    return write_savepoint(
        target,
        batch=original.batch,
        operators=operators,
        offsets=original.offsets(),
        origin={"rewrite_of": source, "savepoint": original.id},
        storage=storage,
    )


def _copied(savepoint: Savepoint, name: str) -> OperatorRows:
    part = savepoint.operator(name)
    return OperatorRows(
        key_columns=part.key_columns,
        max_parallelism=part.max_parallelism,
        states=part.states,
        rows=part.rows(),
        processing_time=part.processing_time,
        written_by=part.info.get("written_by"),
    )
