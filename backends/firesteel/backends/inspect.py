"""Reading a state checkpoint for debugging, like Spark's state data source.

::

    from firesteel.backends.inspect import read_state
    read_state("file:///tmp/state").to_pandas()

One row per entry: operator, batch (the version read), key group, key, state,
kind, user key (maps; list index for lists; timestamp for timers), value,
expiry. Keys and values are shown as JSON text, decoded with msgpack; values
of states written with pickle are shown as hex and never unpickled.

An operator's ``_operator.json`` names the backend that wrote it when that is
not one of the dict backends (``"backend": "rocksdb"``); such operators are
read by that backend's own ``inspect``, found by name with :func:`backend_class`
(built in: ``heap``, ``filesystem``; installed distributions: the entry point
group ``firesteel.backends``).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import fs

from firesteel.backends import format as fmt
from firesteel.backends.storage import (
    METADATA_FILE,
    RestorePlan,
    SnapshotFile,
    SnapshotStorage,
    plan_restore,
)
from firesteel.core.spi import ConfigError, MissingDependencyError
from firesteel.core.toolkit import Folder, StorageConfig
from firesteel.state.backend import StateBackend
from firesteel.state.clock import CLOCK, CLOCK_KEY
from firesteel.state.keygroups import KeyGroupRange
from firesteel.state.schemas import upgrade
from firesteel.state.serializers import MsgpackSerializer, pack, pack_key, unpack

BACKENDS_GROUP = "firesteel.backends"
"""Entry point group under which distributions announce state backends by name."""

_DISTRIBUTIONS = {"rocksdb": "firesteel-rocksdb"}
"""Backends shipped as their own distribution, for the install hint."""

_CLOCK_KEY = pack_key(CLOCK_KEY)
"""The batch clock's key as stored, for its one row in :func:`to_table`."""

SCHEMA = pa.schema(
    [
        ("operator", pa.string()),
        ("batch", pa.int64()),
        ("key_group", pa.int32()),
        ("key", pa.string()),
        ("state", pa.string()),
        ("kind", pa.string()),
        ("user_key", pa.string()),
        ("value", pa.string()),
        ("expires_at", pa.timestamp("ms", tz="UTC")),
    ]
)
"""Columns of :func:`read_state`'s table."""


Entries = dict[tuple[int, str], dict[Any, Any]]
"""Decoded-but-serialized entries by (key group, state); see :func:`to_table` for the forms."""

KeyGroupEntries = dict[str, dict[Any, Any]]
"""One key group's entries by state, in the forms of :data:`Entries`."""


@dataclass(frozen=True)
class StoredState:
    """One operator's state at one version, as every backend reads it back (still serialized).

    ``key_groups`` yields each key group holding state with its entries, in
    ascending order, reading the stored files as it goes (so one key group's
    entries are in memory at a time, not the operator's); it can be iterated
    once. ``kinds``: each state's recorded description (kind, serializer, and
    whatever else the snapshot records), filled in as the files are read: a
    state's is there when a key group holding it is yielded, all of them once
    ``key_groups`` is exhausted; every value is in the schema recorded there (the
    version's), whatever the file it was stored in recorded. ``meta``: the operator
    record (``_operator.json``).
    """

    operator: str
    batch: int
    meta: dict[str, Any]
    kinds: dict[str, dict[str, Any]]
    key_groups: Iterator[tuple[int, KeyGroupEntries]]

    def entries(self) -> Entries:
        """Every key group's entries at once (reads ``key_groups``)."""
        return {
            (key_group, state): table
            for key_group, tables in self.key_groups
            for state, table in tables.items()
        }


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def backend_class(name: str) -> Callable[..., StateBackend]:
    """The state backend class called ``name``: ``heap``, ``filesystem``, or one an installed
    distribution announces in the entry point group ``firesteel.backends`` (``rocksdb``).

    Every backend class takes its location (a path or URI) as first argument.
    """
    from firesteel.backends import FilesystemBackend, HeapBackend

    builtin: dict[str, Callable[..., StateBackend]] = {
        "heap": HeapBackend,
        "filesystem": FilesystemBackend,
    }
    if name in builtin:
        return builtin[name]
    announced = {entry.name: entry for entry in entry_points(group=BACKENDS_GROUP)}
    entry = announced.get(name)
    if entry is None:
        if name in _DISTRIBUTIONS:
            package = f"firesteel.{name}"
            raise MissingDependencyError(package, _DISTRIBUTIONS[name])
        known = ", ".join(sorted({*builtin, *announced}))
        msg = f"unknown state backend {name!r}; installed backends: {known}"
        raise ConfigError(msg)
    loaded: Callable[..., StateBackend] = entry.load()
    return loaded


def list_operators(location: str, storage: StorageConfig | None = None) -> list[str]:
    """The operators that have state under ``location``."""
    folder = Folder(location, storage)
    return sorted(
        info.base_name
        for info in folder.entries()
        if info.type == fs.FileType.Directory and folder.exists(f"{info.base_name}/{METADATA_FILE}")
    )


def read_state(
    location: str,
    operator: str | None = None,
    batch: int | None = None,
    storage: StorageConfig | None = None,
) -> pa.Table:
    """The state under ``location`` (a path or URI) as an Arrow table (see module docs).

    ``operator``: one operator (default: all). ``batch``: the version to read
    (default: the latest version whose files cover every key group -- possibly
    a batch still running or never committed; pass the last committed batch id
    from the query's checkpoint to be sure).
    """
    operators = [operator] if operator else list_operators(location, storage)
    tables = [_read_operator(location, name, batch, storage) for name in operators]
    if not tables:
        return SCHEMA.empty_table()
    return pa.concat_tables(tables)


def _complete(files: Sequence[Any], max_parallelism: int) -> bool:
    covered = sorted((f.key_groups.start, f.key_groups.end) for f in files)
    position = 0
    for start, end in covered:
        if start > position:
            return False
        position = max(position, end + 1)
    return position >= max_parallelism


def recorded_operator(meta: dict[str, Any] | None, operator: str, location: str) -> dict[str, Any]:
    """``operator``'s record (``_operator.json``) read under ``location``; a
    :class:`ConfigError` when there is none."""
    if meta is None:
        msg = f"no state of operator '{operator}' under {location}"
        raise ConfigError(msg)
    return meta


def chosen_version(
    meta: dict[str, Any],
    listing: Mapping[int, Sequence[Any]],
    batch: int | None,
    *,
    operator: str,
    location: str,
) -> int | None:
    """The version to inspect: ``batch`` if stored, else (``batch`` None) the latest whose
    files (anything with a ``key_groups`` range) cover every key group of the operator
    record ``meta``; None when no version is complete. A missing ``batch`` is a
    :class:`ConfigError` listing what is."""
    max_parallelism = int(meta["max_parallelism"])
    if batch is None:
        complete = [v for v, files in sorted(listing.items()) if _complete(files, max_parallelism)]
        return complete[-1] if complete else None
    if batch not in listing:
        msg = (
            f"operator '{operator}' has no state version {batch} under {location} "
            f"(available: {sorted(listing)})"
        )
        raise ConfigError(msg)
    return batch


def _read_operator(
    location: str, operator: str, batch: int | None, config: StorageConfig | None
) -> pa.Table:
    written_by = _writer(location, operator, config)
    if written_by is not None:
        return written_by.inspect(operator=operator, batch=batch)
    stored = read_stored_state(location, operator, batch, config)
    return SCHEMA.empty_table() if stored is None else stored_table(stored)


def _writer(location: str, operator: str, config: StorageConfig | None) -> StateBackend | None:
    """The backend that wrote ``operator``'s state when it is not one of the dict backends."""
    storage = SnapshotStorage(location, operator, config=config)
    meta = recorded_operator(storage.read_metadata(), operator, location)
    if meta.get("backend") is None:
        return None
    return backend_class(str(meta["backend"]))(location, storage_options=config or StorageConfig())


def stored_state(
    location: str, operator: str, batch: int | None, config: StorageConfig | None = None
) -> StoredState | None:
    """``operator``'s state under ``location`` at version ``batch`` (default: the latest
    complete one; None when there is none), whichever backend wrote it."""
    written_by = _writer(location, operator, config)
    if written_by is None:
        return read_stored_state(location, operator, batch, config)
    read = getattr(written_by, "stored_state", None)
    if read is None:
        msg = f"the {written_by.name} backend cannot export operator '{operator}' under {location}"
        raise ConfigError(msg)
    result: StoredState | None = read(operator, batch)
    return result


def read_stored_state(
    location: str, operator: str, batch: int | None, config: StorageConfig | None = None
) -> StoredState | None:
    """``operator``'s state under ``location`` as the dict backends wrote it, at version
    ``batch`` (default: the latest complete one; None when there is none)."""
    storage = SnapshotStorage(location, operator, config=config)
    meta = recorded_operator(storage.read_metadata(), operator, location)
    listing = storage.list_versions()
    batch = chosen_version(meta, listing, batch, operator=operator, location=location)
    if batch is None:
        return None
    everything = KeyGroupRange(0, int(meta["max_parallelism"]) - 1)
    plans = plan_restore(
        storage, listing, everything, batch, first_version=int(meta["first_batch"]), in_memory={}
    )
    kinds: dict[str, dict[str, Any]] = {}
    return StoredState(operator, batch, meta, kinds, _key_groups(storage, plans, kinds))


def _key_groups(
    storage: SnapshotStorage, plans: Mapping[int, RestorePlan], kinds: dict[str, dict[str, Any]]
) -> Iterator[tuple[int, KeyGroupEntries]]:
    """Each key group's entries, the files of one chain (a task's key groups, usually)
    read once for all the key groups rebuilt from them, then dropped."""
    chains: dict[tuple[SnapshotFile, ...], list[int]] = {}
    for key_group, plan in sorted(plans.items()):
        chains.setdefault(plan.files, []).append(key_group)
    for files, key_groups in sorted(chains.items(), key=lambda item: item[1][0]):
        snapshots = [storage.read(file) for file in files]
        newest: dict[str, dict[str, Any]] = {}
        for snapshot in snapshots:
            newest.update(snapshot.header.get("states", {}))
        kinds.update(newest)
        bodies = []
        for file, snapshot in zip(files, snapshots, strict=True):
            recorded = snapshot.header.get("states", {})
            where = f"snapshot {storage.describe(file.path)}"
            rows = _in_newest_schema(storage.operator, snapshot.rows, recorded, newest, where)
            bodies.append((rows, _rows_by_key_group(rows)))
        for key_group in key_groups:
            tables: KeyGroupEntries = {}
            for rows, positions in bodies:
                found = positions.get(key_group)
                if found is not None:
                    _apply(tables, rows.take(found))
            if tables:
                yield key_group, tables


def _in_newest_schema(
    operator: str,
    rows: pa.Table,
    recorded: Mapping[str, Mapping[str, Any]],
    newest: Mapping[str, Mapping[str, Any]],
    where: str,
) -> pa.Table:
    """``rows`` of one snapshot file with the values of each state whose schema evolved
    since that file was written converted to the schema of the chain's newest file.

    A dict backend converts a full snapshot's values when it restores them after an
    upgrade, but the file keeps them in the old schema until the next full snapshot: a
    chain may hold both, and what is read here (a savepoint, a table) records one."""
    values = None
    for state, info in recorded.items():
        target = newest[state]
        if info.get("schema") == target.get("schema") or info["serializer"] != "msgpack":
            continue
        evolved = upgrade(
            operator,
            state,
            info.get("schema"),
            declared=None if target.get("schema") is None else json.loads(target["schema"]),
            serializer=MsgpackSerializer(),
            where=where,
        )
        if evolved is None:
            continue
        if values is None:
            values = rows.column("value").to_pylist()
            states = rows.column("state").to_pylist()
        for index, (name, value) in enumerate(zip(states, values, strict=True)):
            if name == state and value is not None:
                values[index] = pack(evolved.loads(value))
    if values is None:
        return rows
    position = rows.schema.get_field_index("value")
    return rows.set_column(position, rows.schema.field(position), pa.array(values, pa.binary()))


def _rows_by_key_group(rows: pa.Table) -> dict[int, pa.Array]:
    """The positions of each key group's rows in ``rows``, in file order (a stable sort)."""
    column = rows.column("key_group").combine_chunks()
    order = pc.sort_indices(column)
    runs = pc.run_end_encode(column.take(order))
    result: dict[int, pa.Array] = {}
    start = 0
    for key_group, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist(), strict=True):
        result[key_group] = order.slice(start, end - start)
        start = end
    return result


def _apply(tables: KeyGroupEntries, rows: pa.Table) -> None:
    """Apply one key group's rows generically: bytes stay bytes; lists/maps/timers by
    operation."""
    for state, op, key, user_key, value, expires in zip(
        *(rows.column(name).to_pylist() for name in fmt.BODY_SCHEMA.names[1:]), strict=True
    ):
        table = tables.setdefault(state, {})
        if op == fmt.OP_CLEAR:
            table.pop(key, None)
        elif op == fmt.OP_APPEND:
            table.setdefault(key, []).append((value, expires))
        elif user_key is None:
            if op == fmt.OP_DELETE:
                table.pop(key, None)
            else:
                table[key] = (value, expires)
        elif op == fmt.OP_DELETE:
            table.get(key, {}).pop(user_key, None)
        else:
            table.setdefault(key, {})[user_key] = (value, expires)


def _decode(data: bytes | None, serializer: str) -> str | None:
    if data is None:
        return None
    if serializer != "msgpack":
        return f"<{serializer}> {data.hex()}"
    return _json(unpack(data))


def stored_table(stored: StoredState) -> pa.Table:
    """:func:`to_table` of a :class:`StoredState`."""
    return to_table(stored.operator, stored.batch, stored.entries(), stored.kinds)


def to_table(
    operator: str,
    batch: int,
    entries: Entries,
    kinds: dict[str, dict[str, Any]],
) -> pa.Table:
    """Rows of :data:`SCHEMA` from decoded-but-serialized entries, for every backend.

    ``entries[(key_group, state)]`` maps a msgpack grouping key to: ``(value,
    expires_ms)`` for a value state; a list of them for a list; a dict of msgpack
    user key -> ``(value, expires_ms)`` for a map; for timers (state
    ``__timers__``) an iterable of msgpack timestamps. ``kinds`` gives each
    state's kind and serializer. The batch clock (:mod:`firesteel.state.clock`),
    kept in every key group, is one row: key group -1, kind ``clock``, the
    processing time of the version's batch in epoch milliseconds.
    """
    columns: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}

    def add(where: tuple[int, bytes, str, str], user: str | None, value: Any) -> None:
        kg, key, state, kind = where
        data, expires = value
        columns["operator"].append(operator)
        columns["batch"].append(batch)
        columns["key_group"].append(kg)
        columns["key"].append(_json(unpack(key)))
        columns["state"].append(state)
        columns["kind"].append(kind)
        columns["user_key"].append(user)
        columns["value"].append(_decode(data, serializer))
        columns["expires_at"].append(
            dt.datetime.fromtimestamp(expires / 1000, tz=dt.timezone.utc) if expires else None
        )

    clocks = [
        unpack(content[0])[0]
        for (_, state), table in entries.items()
        if state == CLOCK.name
        for content in table.values()
    ]
    if clocks:
        # One row for the whole operator: every key group holds the same time.
        serializer = "msgpack"
        add((-1, _CLOCK_KEY, CLOCK.name, "clock"), None, (pack(max(clocks)), None))
    for (kg, state), table in sorted(entries.items(), key=lambda item: item[0]):
        if state == CLOCK.name:
            continue
        info = kinds.get(state, {"kind": "timer", "serializer": "msgpack"})
        kind, serializer = info["kind"], info["serializer"]
        for key, content in table.items():
            if kind == "list":
                for index, element in enumerate(content):
                    add((kg, key, state, kind), str(index), element)
            elif kind == "map":
                for user_key, element in content.items():
                    add((kg, key, state, kind), _json(unpack(user_key)), element)
            elif kind == "timer":
                for user_key in content:
                    add((kg, key, state, kind), _json(unpack(user_key)), (None, None))
            else:
                add((kg, key, state, kind), None, content)
    return pa.table(columns, schema=SCHEMA)
