"""Taking a savepoint of the state a backend stored, whichever backend it was, and reading one.

::

    from firesteel.backends.savepoint import create, read_savepoint, stop_with_savepoint
    create("s3a://bucket/state", "s3a://bucket/savepoints/v1", checkpoint="/chk/job")
    read_savepoint("s3a://bucket/savepoints/v1").to_pandas()
    stop_with_savepoint(query, "s3a://bucket/state", "s3a://bucket/savepoints/v2")

:func:`create` reads every operator's state at one committed batch (by default
the last batch of ``checkpoint``'s commit log, Spark's own record of what
committed), turns each backend's entries into the canonical rows of
:mod:`firesteel.state.savepoint.format`, copies Spark's ``offsets/<N>`` beside
them and writes the metadata record last. ``firesteel savepoint create`` runs it;
:func:`stop_with_savepoint` stops a running query between two batches and runs it.
It streams: a backend yields its stored state one key group at a time and the
rows go into the Parquet writer as they come, so the process holds one key
group's entries (and one stored file or RocksDB instance being read), not the
operator's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from firesteel.backends.heap.states import TIMERS as STORED_TIMERS
from firesteel.backends.inspect import (
    SCHEMA,
    Entries,
    KeyGroupEntries,
    StoredState,
    list_operators,
    stored_state,
    to_table,
)
from firesteel.core.metrics.progress import checkpoint_of
from firesteel.core.spi import ConfigError
from firesteel.core.toolkit import Folder, StorageConfig, read_query_id, write_savepoint_taken
from firesteel.state.clock import CLOCK
from firesteel.state.savepoint.format import (
    ROWS_SCHEMA,
    TIMERS,
    OperatorInfo,
    Savepoint,
    SavepointError,
    SavepointWriter,
    open_savepoint,
)
from firesteel.state.savepoint.restore import MARKER
from firesteel.state.serializers import pack, unpack

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

Progress = Callable[[str, int, int], None]
"""Told each key group a savepoint wrote: operator, key group, the operator's key groups."""

logger = logging.getLogger(__name__)

_POLL_SECONDS = 0.05
"""How often :func:`stop_with_savepoint` asks Spark whether a batch is running."""

_RESERVED = frozenset({CLOCK.name, MARKER.name})
"""firesteel's own states: the clock goes into a savepoint's metadata, the restore marker
nowhere (a savepoint of a restored job is a new savepoint)."""


def last_committed_batch(checkpoint: str) -> int | None:
    """The newest batch in Spark's commit log of ``checkpoint`` (None before any commit)."""
    batches = [int(name) for name in Folder(checkpoint).names("commits") if name.isdigit()]
    return max(batches) if batches else None


def _check_query(checkpoint: str, found: Mapping[str, StoredState], location: str) -> None:
    """Each operator's state must have been written by the query of ``checkpoint``: another
    query's batches and source positions do not describe it."""
    query = read_query_id(checkpoint)
    for name, stored in found.items():
        owner = stored.meta.get("query_id")
        if query and owner and owner != query:
            msg = (
                f"savepoint: operator '{name}': the state under {location} was written by "
                f"Spark query {owner}, but the checkpoint {checkpoint} is query {query}'s: its "
                "batches and source positions do not describe this state. Give the checkpoint "
                "of the query that wrote the state"
            )
            raise ConfigError(msg)


def _offsets_entry(checkpoint: str, batch: int) -> bytes:
    return Folder(checkpoint).read(f"offsets/{batch}")


class _Canonical:
    """One operator's stored state as savepoint rows, one key group at a time: expired
    entries left out, the clock kept for the metadata."""

    def __init__(self, stored: StoredState) -> None:
        self.stored = stored
        self.clock: tuple[int, int] | None = None
        self.timers = False

    def chunks(self, progress: Progress | None = None) -> Iterator[pa.Table]:
        """Each key group's rows (read :meth:`info` once they are consumed); ``progress``
        is told each key group read."""
        for key_group, tables in self.stored.key_groups:
            yield self._rows(key_group, tables)
            if progress is not None:
                progress(self.stored.operator, key_group, int(self.stored.meta["max_parallelism"]))

    def _rows(self, key_group: int, tables: KeyGroupEntries) -> pa.Table:
        clock = next(iter(tables.get(CLOCK.name, {}).values()), None)
        stamp = None if clock is None else tuple(int(t) for t in unpack(clock[0]))
        if stamp is not None and (self.clock is None or stamp > self.clock):
            self.clock = (stamp[0], stamp[1])
        # An entry expired at the time of the task that last wrote its key group, the
        # time at which the job itself stopped seeing it.
        now = 0 if stamp is None else stamp[0]
        columns: dict[str, list[Any]] = {name: [] for name in ROWS_SCHEMA.names}

        def add(key: bytes, state: str, user_key: bytes | None, entry: Any) -> None:
            data, expires = entry
            if expires and expires <= now:
                return
            columns["key_group"].append(key_group)
            columns["key"].append(key)
            columns["state"].append(state)
            columns["user_key"].append(user_key)
            columns["value"].append(data)
            columns["expires_ms"].append(expires)

        for stored_name, table in sorted(tables.items()):
            if stored_name in _RESERVED:
                continue
            timers = stored_name == STORED_TIMERS
            self.timers = self.timers or timers
            state = TIMERS if timers else stored_name
            kind = "timer" if timers else self.stored.kinds[state]["kind"]
            for key, content in table.items():
                if kind == "value":
                    add(key, state, None, content)
                elif kind == "list":
                    for element in content:
                        add(key, state, None, element)
                elif kind == "map":
                    for user_key, element in content.items():
                        add(key, state, user_key, element)
                else:
                    for stamp_key in content:
                        add(key, state, stamp_key, (None, None))
        return pa.table(columns, schema=ROWS_SCHEMA)

    def info(self) -> OperatorInfo:
        """The operator's metadata, once :meth:`chunks` is consumed."""
        states = {name: dict(info) for name, info in self.stored.kinds.items()}
        if self.timers:
            states[TIMERS] = {"kind": "timer", "serializer": "msgpack"}
        for reserved in _RESERVED:
            states.pop(reserved, None)
        return OperatorInfo(
            key_columns=list(self.stored.meta.get("key", [])),
            max_parallelism=int(self.stored.meta["max_parallelism"]),
            states=states,
            processing_time=self.clock,
            written_by=str(self.stored.meta.get("backend") or "filesystem"),
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
    progress: Progress | None = None,
) -> Savepoint:
    """Write a savepoint of the state under ``state_location`` at ``target``.

    ``checkpoint``: the query's Spark checkpoint: the batch defaults to its last
    committed one, a later ``batch`` is refused, and its ``offsets/<batch>`` is
    copied into the savepoint (the source positions a restored job starts from).
    State written by another query than the checkpoint's is refused.
    Without it, ``batch`` must be given and no positions are recorded.
    ``operators``: which (default: every operator under the location).
    ``storage`` / ``target_storage``: how to reach the two locations' object stores.
    ``progress``: called after each key group is written, with the operator, the key
    group and the operator's number of key groups (``firesteel savepoint create`` draws
    a progress bar with it).
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
    found: dict[str, StoredState] = {}
    for name in names:
        stored = stored_state(state_location, name, batch, storage)
        if stored is None:
            msg = f"savepoint: operator '{name}' has no state of batch {batch} in {state_location}"
            raise ConfigError(msg)
        found[name] = stored
    if checkpoint is not None:
        _check_query(checkpoint, found, state_location)
    writer = SavepointWriter(target, StorageConfig.given(target_storage))
    for name, stored in found.items():
        canonical = _Canonical(stored)
        file = writer.write_rows(name, canonical.chunks(progress))
        writer.describe(name, canonical.info(), file)
    offsets = _offsets_entry(checkpoint, batch) if checkpoint is not None else None
    origin = {"state_location": state_location, "checkpoint": checkpoint}
    made = writer.finish(batch=batch, offsets=offsets, origin=origin)
    if checkpoint is not None:
        _record_taken(checkpoint, made, target)
    return made


def _record_taken(checkpoint: str, made: Savepoint, target: str) -> None:
    """Note the savepoint in its query's checkpoint (``firesteel status`` lists them). The
    savepoint is whole before: a note that cannot be written is logged, never a failure."""
    note = {
        "id": made.id,
        "batch": made.batch,
        "location": target,
        "operators": made.operators,
        "taken_at": time.time(),
    }
    try:
        write_savepoint_taken(checkpoint, note)
    except OSError as exc:
        logger.warning("savepoint %s: not noted in %s: %s", made.id, checkpoint, exc)


def stop_with_savepoint(
    query: StreamingQuery,
    state_location: str,
    target: str,
    *,
    checkpoint: str | None = None,
    operators: Sequence[str] | None = None,
    timeout_seconds: float = 600.0,
    storage: StorageConfig | Mapping[str, str] | None = None,
    target_storage: StorageConfig | Mapping[str, str] | None = None,
) -> Savepoint:
    """Stop a running ``query`` and write a savepoint of its state at its last committed
    batch to ``target`` (Flink's ``stop --savepointPath``).

    The batch running when it is called finishes first: the query is stopped between two
    batches (Spark has no call for that, so the stop waits while Spark reports a trigger
    active, for at most ``timeout_seconds``, then stops). Should a new batch start in the
    moment between, the stop interrupts it before it commits; the savepoint is of the last
    committed batch either way, and a job restored from it (``restore_from``) on the same
    checkpoint runs the interrupted batch again. ``checkpoint``: the query's location
    (read from the query when not given; needed over Spark Connect). The rest is
    :func:`create`'s. ``firesteel savepoint stop`` asks a running driver to call this
    (:mod:`firesteel.backends.control`).
    """
    location = checkpoint or checkpoint_of(query)
    deadline = time.monotonic() + timeout_seconds
    while query.isActive and query.status["isTriggerActive"]:
        if time.monotonic() > deadline:
            logger.warning(
                "savepoint: query %s still in a batch after %.0f s; stopping it there",
                query.id,
                timeout_seconds,
            )
            break
        time.sleep(_POLL_SECONDS)
    query.stop()
    failure = query.exception()
    if failure is not None:
        msg = f"savepoint: query {query.id} had failed before the stop ({failure}); none taken"
        raise SavepointError(msg)
    committed = last_committed_batch(location)
    logger.info("savepoint: query %s stopped after batch %s", query.id, committed)
    return create(
        state_location,
        target,
        checkpoint=location,
        operators=operators,
        storage=storage,
        target_storage=target_storage,
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
