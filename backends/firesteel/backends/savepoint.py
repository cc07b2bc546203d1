"""Taking a savepoint of the state a backend stored, whichever backend it was, and reading one.

::

    from firesteel.backends.savepoint import create, read_savepoint
    create("s3a://bucket/state", "s3a://bucket/savepoints/v1", checkpoint="/chk/job")
    read_savepoint("s3a://bucket/savepoints/v1").to_pandas()

:func:`create` reads every operator's state at one committed batch (by default
the last batch of ``checkpoint``'s commit log, Spark's own record of what
committed), turns each backend's entries into the canonical rows of
:mod:`firesteel.state.savepoint.format`, copies Spark's ``offsets/<N>`` beside
them and writes the metadata record last. ``firesteel savepoint create`` runs it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyarrow import fs

from firesteel.backends.heap.states import TIMERS as STORED_TIMERS
from firesteel.backends.inspect import (
    SCHEMA,
    Entries,
    StoredState,
    list_operators,
    stored_state,
    to_table,
)
from firesteel.core.checkpoint import filesystem
from firesteel.core.errors import ConfigError
from firesteel.core.storage import StorageConfig
from firesteel.state.clock import CLOCK
from firesteel.state.savepoint.format import (
    ROWS_SCHEMA,
    TIMERS,
    OperatorRows,
    Savepoint,
    open_savepoint,
    write_savepoint,
)
from firesteel.state.savepoint.restore import MARKER
from firesteel.state.serializers import pack, unpack

logger = logging.getLogger(__name__)

_RESERVED = frozenset({CLOCK.name, MARKER.name})
"""firesteel's own states: the clock goes into a savepoint's metadata, the restore marker
nowhere (a savepoint of a restored job is a new savepoint)."""


def last_committed_batch(checkpoint: str) -> int | None:
    """The newest batch in Spark's commit log of ``checkpoint`` (None before any commit)."""
    fsys, base = filesystem(checkpoint)
    infos = fsys.get_file_info(fs.FileSelector(f"{base}/commits", allow_not_found=True))
    batches = [int(info.base_name) for info in infos if info.base_name.isdigit()]
    return max(batches) if batches else None


def _offsets_entry(checkpoint: str, batch: int) -> bytes:
    fsys, base = filesystem(checkpoint)
    with fsys.open_input_stream(f"{base}/offsets/{batch}") as stream:
        data: bytes = stream.read()
    return data


def _canonical(stored: StoredState) -> OperatorRows:
    """A backend's entries as savepoint rows: expired entries left out, the clock as metadata."""
    clocks = [
        unpack(content[0])
        for (_, state), table in stored.entries.items()
        if state == CLOCK.name
        for content in table.values()
    ]
    clock = max(clocks) if clocks else None
    now = clock[0] if clock else 0
    columns: dict[str, list[Any]] = {name: [] for name in ROWS_SCHEMA.names}

    def add(kg: int, key: bytes, state: str, user_key: bytes | None, entry: Any) -> None:
        data, expires = entry
        if expires and expires <= now:
            return
        columns["key_group"].append(kg)
        columns["key"].append(key)
        columns["state"].append(state)
        columns["user_key"].append(user_key)
        columns["value"].append(data)
        columns["expires_ms"].append(expires)

    states = {name: dict(info) for name, info in stored.kinds.items()}
    for (kg, stored_name), table in sorted(stored.entries.items(), key=lambda item: item[0]):
        if stored_name in _RESERVED:
            continue
        timers = stored_name == STORED_TIMERS
        state = TIMERS if timers else stored_name
        kind = "timer" if timers else states[state]["kind"]
        for key, content in table.items():
            if kind == "value":
                add(kg, key, state, None, content)
            elif kind == "list":
                for element in content:
                    add(kg, key, state, None, element)
            elif kind == "map":
                for user_key, element in content.items():
                    add(kg, key, state, user_key, element)
            else:
                for stamp in content:
                    add(kg, key, state, stamp, (None, None))
    if any(state == STORED_TIMERS for _, state in stored.entries):
        states[TIMERS] = {"kind": "timer", "serializer": "msgpack"}
    for reserved in _RESERVED:
        states.pop(reserved, None)
    return OperatorRows(
        key_columns=list(stored.meta.get("key", [])),
        max_parallelism=int(stored.meta["max_parallelism"]),
        states=states,
        rows=pa.table(columns, schema=ROWS_SCHEMA),
        processing_time=None if clock is None else (int(clock[0]), int(clock[1])),
        written_by=str(stored.meta.get("backend") or "filesystem"),
    )


def create(
    state_location: str,
    target: str,
    *,
    checkpoint: str | None = None,
    batch: int | None = None,
    operators: Sequence[str] | None = None,
    storage: StorageConfig | Mapping[str, str] | None = None,
    target_storage: StorageConfig | Mapping[str, str] | None = None,
) -> Savepoint:
    """Write a savepoint of the state under ``state_location`` at ``target``.

    ``checkpoint``: the query's Spark checkpoint: the batch defaults to its last
    committed one, a later ``batch`` is refused, and its ``offsets/<batch>`` is
    copied into the savepoint (the source positions a restored job starts from).
    Without it, ``batch`` must be given and no positions are recorded.
    ``operators``: which (default: every operator under the location).
    ``storage`` / ``target_storage``: how to reach the two locations' object stores.
    """
    storage = StorageConfig.given(storage)
    committed = last_committed_batch(checkpoint) if checkpoint is not None else None
    if checkpoint is not None and committed is None:
        msg = f"savepoint: the query at {checkpoint} has committed no batch yet"
        raise ConfigError(msg)
    if batch is None:
        if committed is None:
            msg = "savepoint: give the query's checkpoint (or a committed batch id with batch=)"
            raise ConfigError(msg)
        batch = committed
    elif committed is not None and batch > committed:
        msg = f"savepoint: batch {batch} has not committed in {checkpoint} (last: {committed})"
        raise ConfigError(msg)
    names = list(operators or list_operators(state_location, storage))
    if not names:
        msg = f"savepoint: no operator state under {state_location}"
        raise ConfigError(msg)
    parts: dict[str, OperatorRows] = {}
    for name in names:
        stored = stored_state(state_location, name, batch, storage)
        if stored is None:
            msg = f"savepoint: operator '{name}' has no state of batch {batch} in {state_location}"
            raise ConfigError(msg)
        parts[name] = _canonical(stored)
    offsets = _offsets_entry(checkpoint, batch) if checkpoint is not None else None
    origin = {"state_location": state_location, "checkpoint": checkpoint}
    return write_savepoint(
        target,
        batch=batch,
        operators=parts,
        offsets=offsets,
        origin=origin,
        storage=StorageConfig.given(target_storage),
    )


def read_savepoint(
    location: str, operator: str | None = None, storage: StorageConfig | None = None
) -> pa.Table:
    """The savepoint at ``location`` as the table of :data:`firesteel.backends.inspect.SCHEMA`
    (the table ``firesteel state`` prints for checkpoints); ``operator``: one of them."""
    savepoint = open_savepoint(location, storage)
    names = [operator] if operator else savepoint.operators
    tables = []
    for name in names:
        part = savepoint.operator(name)
        entries: Entries = {}
        rows = part.rows()
        for kg, key, state, user_key, value, expires in zip(
            *(rows.column(c).to_pylist() for c in ROWS_SCHEMA.names), strict=True
        ):
            kind = part.states[state]["kind"]
            table = entries.setdefault((kg, state), {})
            if kind == "value":
                table[key] = (value, expires)
            elif kind == "list":
                table.setdefault(key, []).append((value, expires))
            else:
                table.setdefault(key, {})[user_key] = (value, expires)
        if part.processing_time is not None:
            entries[(0, CLOCK.name)] = {b"": (pack(list(part.processing_time)), None)}
        tables.append(to_table(name, savepoint.batch, entries, part.states))
    return pa.concat_tables(tables) if tables else SCHEMA.empty_table()
