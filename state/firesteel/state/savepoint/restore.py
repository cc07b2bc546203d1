"""Starting a stateful operator from a savepoint, on any backend, at any parallelism.

``stateful(..., restore_from=<savepoint>)`` gives the operator a
:class:`SavepointRestore`. On the driver, :meth:`SavepointRestore.check` refuses a
savepoint that does not fit before the query starts: no state for this operator's
name (its uid, as in Flink; the message lists the operators it holds), other key
columns, another key-group count. In each task, :meth:`SavepointRestore.apply`
loads the savepoint's rows of the task's key groups through the ordinary state
API, so every backend stores them its own way and snapshots them with the batch.

Each key group loaded records the savepoint's id in a reserved state
(:data:`MARKER`) written in the same snapshot, so the load happens exactly once
per key group: a re-run of the first batch (its snapshot never committed) loads
again from nothing, a later batch finds the marker and loads nothing, and a key
group that already holds state of another origin (a clock but no marker, or the
marker of another savepoint than the one :meth:`SavepointRestore.check` found)
is refused rather than overwritten or silently kept.

The state of batch N loads only into batch N+1 (the query that took the
savepoint goes on, on its own checkpoint) or batch 0 (a new checkpoint, whose
sources the user starts at the savepoint's positions): into any other batch it
would leave out the records of the batches between, or count them twice.

A state in the savepoint that the processor neither declares nor drops
(``ctx.drop_state``) is refused, listing every such state, unless
``allow_non_restored_state`` says to drop them (Flink's ``--allowNonRestoredState``).
So is an operator of the savepoint that no operator of the query restores: each
``stateful()`` restoring from a savepoint adds its name to a Spark local property
of the driver thread (:meth:`SavepointRestore.claim`), which the query started
from that thread hands to its tasks; the first batch's tasks refuse to load when
the savepoint holds an operator no one claimed. TTL entries restart their
time-to-live at the restore.

A state whose type changed since the savepoint evolves by the rules a
checkpoint's does (:mod:`firesteel.state.schemas`: add a field with a default,
remove one, rename one through ``renames``, widen a number): its values are
converted as they are loaded, and a change Avro does not resolve is refused
before any value is loaded. The savepoint holds each state's values in the one
schema it records (:func:`firesteel.backends.savepoint.create` converts the
values a dict backend still kept in an older one).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import pyarrow.compute as pc

from firesteel.core.spi import ConfigError
from firesteel.core.toolkit import StorageConfig
from firesteel.state.api import ListState, MapState, ValueState
from firesteel.state.backend import KeyedStateStore, KeyedTask, OperatorSpec, StateDeclarations
from firesteel.state.clock import CLOCK, CLOCK_KEY
from firesteel.state.descriptors import StateDescriptor, StateKind, reserved_value_state
from firesteel.state.keygroups import KeyGroupRange
from firesteel.state.savepoint.format import (
    TIMERS,
    OperatorSavepoint,
    Savepoint,
    SavepointError,
    open_savepoint,
)
from firesteel.state.schemas import Loader, upgrade
from firesteel.state.serializers import check_serializer, unpack, unpack_key

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

_CHUNK = 64 * 1024
"""Rows turned into Python objects at a time while loading (a savepoint's row group)."""

MARKER = reserved_value_state("__firesteel_savepoint__", str)
"""Per key group: the id of the savepoint it was loaded from (see module docs)."""

CLAIMED = "spark.firesteel.savepoint.claimed"
"""The session setting naming, per savepoint path, the operators restoring from it (JSON:
path -> sorted names). Spark hands a query's ``spark.*`` session settings to its tasks as
local properties, on a classic session and over Spark Connect alike (where there is no
SparkContext to set a local property on)."""


def declarations(
    restore: SavepointRestore | None,
    descriptors: Sequence[StateDescriptor],
    dropped: Sequence[str],
) -> StateDeclarations:
    """The states a task opens its store with: the marker while restoring; otherwise a
    marker left by an earlier restore is dropped silently."""
    if restore is None:
        return StateDeclarations(descriptors, [*dropped, MARKER.name])
    return StateDeclarations([*descriptors, MARKER], dropped)


@dataclass(frozen=True)
class SavepointRestore:
    """Where an operator's state starts: the savepoint at ``path`` (picklable)."""

    path: str
    allow_non_restored_state: bool = False
    """Drop the savepoint's states (or whole operator) that the job has no use for."""
    storage: StorageConfig | Mapping[str, str] = field(default_factory=StorageConfig)
    """How to reach the savepoint's object store (Hadoop's names: ``fs.s3a.endpoint``...)."""
    savepoint_id: str | None = None
    """The id of the savepoint found at ``path`` when the job was built (set by
    :meth:`check`): a key group restored from another savepoint is refused. None: any."""

    def __post_init__(self) -> None:
        # A frozen dataclass: the settings become their hashable, secret-hiding form.
        object.__setattr__(self, "storage", StorageConfig.given(self.storage))

    @property
    def _storage(self) -> StorageConfig:
        assert isinstance(self.storage, StorageConfig)
        return self.storage

    def check(
        self, spec: OperatorSpec, declared: Iterable[StateDescriptor] = ()
    ) -> SavepointRestore:
        """Driver side: the savepoint is whole and fits operator ``spec`` and the states
        ``declared`` (the processor's descriptors: each one's kind, serializer and type must
        be the savepoint's, or a type they evolve to), before any state location is touched;
        returns this restore pinned to it (:attr:`savepoint_id`), for the tasks."""
        savepoint = open_savepoint(self.path, self._storage)
        pinned = dataclasses.replace(self, savepoint_id=savepoint.id)
        if spec.name not in savepoint.operators:
            if self.allow_non_restored_state:
                logger.warning(
                    "operator %s starts empty: savepoint %s holds no state for it (it holds %s)",
                    spec.name,
                    self.path,
                    savepoint.operators,
                )
                return pinned
            listed = ", ".join(f"'{name}'" for name in savepoint.operators) or "nothing"
            msg = (
                f"operator '{spec.name}': savepoint {self.path} has no state for it; it holds "
                f"the state of {listed}, which would be dropped. Name the operator as in the "
                "savepoint (stateful(name=...)) if it is the same one, or pass "
                "allow_non_restored_state=True to start it empty"
            )
            raise SavepointError(msg)
        part = savepoint.operator(spec.name)
        if part.key_columns != list(spec.key_columns):
            msg = (
                f"operator '{spec.name}': key columns {list(spec.key_columns)} differ from "
                f"{part.key_columns} in savepoint {self.path}; state cannot be re-keyed"
            )
            raise SavepointError(msg)
        if part.max_parallelism != spec.max_parallelism:
            msg = (
                f"operator '{spec.name}': savepoint {self.path} has {part.max_parallelism} key "
                f"groups; set max_parallelism={part.max_parallelism} (parallelism may change)"
            )
            raise SavepointError(msg)
        for desc in declared:
            info = part.states.get(desc.name)
            if info is not None and desc.name != TIMERS:
                _loader(spec.name, desc.name, info, desc, self.path)
        logger.info(
            "operator %s restores from savepoint %s of batch %d; its sources' positions are "
            "in %s/offsets/%d",
            spec.name,
            self.path,
            savepoint.batch,
            self.path,
            savepoint.batch,
        )
        return pinned

    def claim(self, session: SparkSession, operator: str) -> None:
        """Driver side: record in ``session``'s settings (which a query started from it
        hands its tasks) that ``operator`` restores from this savepoint."""
        claimed = json.loads(session.conf.get(CLAIMED, None) or "{}")
        claimed[self.path] = sorted({*claimed.get(self.path, []), operator})
        session.conf.set(CLAIMED, json.dumps(claimed, sort_keys=True))

    def _check_claimed(self, savepoint: Savepoint) -> None:
        """Task side: refuse when the savepoint holds an operator that no operator of the
        running query claimed (unless told to drop it)."""
        from pyspark import TaskContext

        task = TaskContext.get()
        recorded = task.getLocalProperty(CLAIMED) if task is not None else None
        if recorded is None or self.allow_non_restored_state:
            return  # not a Spark task of a query started after stateful() (driven directly)
        claimed = set(json.loads(recorded).get(self.path, []))
        unclaimed = [name for name in savepoint.operators if name not in claimed]
        if unclaimed:
            listed = ", ".join(f"'{name}'" for name in unclaimed)
            msg = (
                f"savepoint {self.path} holds the state of operator {listed}, which no "
                "stateful() of this query restores and would be dropped; restore it "
                "(stateful(name=..., restore_from=...)) or pass "
                "allow_non_restored_state=True"
            )
            raise SavepointError(msg)

    def apply(
        self,
        store: KeyedStateStore,
        spec: OperatorSpec,
        task: KeyedTask,
        declared: StateDeclarations,
    ) -> None:
        """Task side: load the savepoint into the task's key groups that never had it."""
        marker = cast(ValueState, store.state(MARKER))
        clock = cast(ValueState, store.state(CLOCK))
        fresh: list[int] = []
        for key_group in task.key_groups:
            store.set_current_key(CLOCK_KEY, key_group)
            loaded_from = marker.value()
            if loaded_from is not None:
                self._check_origin(spec, key_group, loaded_from)
                continue
            if clock.value() is not None:
                msg = (
                    f"operator '{spec.name}': key group {key_group} already holds state that "
                    f"was not restored from savepoint {self.path}; restore into a fresh state "
                    "location, or leave out restore_from to keep the existing state"
                )
                raise SavepointError(msg)
            fresh.append(key_group)
        if not fresh:
            return
        savepoint = open_savepoint(self.path, self._storage)
        self._check_claimed(savepoint)
        if spec.name in savepoint.operators:
            self._check_batch(savepoint, spec, task.scope.batch_id)
            part = savepoint.operator(spec.name)
            self._load(store, part, declared, fresh)
            processing_time = part.processing_time
        else:
            processing_time = None
        for key_group in fresh:
            store.set_current_key(CLOCK_KEY, key_group)
            marker.update(savepoint.id)
            if processing_time is not None:
                clock.update(list(processing_time))
        logger.info(
            "operator %s: key groups %d-%d loaded from savepoint %s",
            spec.name,
            fresh[0],
            fresh[-1],
            self.path,
        )

    def _check_origin(self, spec: OperatorSpec, key_group: int, loaded_from: str) -> None:
        """Task side: a key group restored earlier must have come from this savepoint."""
        if self.savepoint_id is None or loaded_from == self.savepoint_id:
            return
        msg = (
            f"operator '{spec.name}': key group {key_group} was restored from savepoint "
            f"{loaded_from}, and restore_from now names {self.path} (savepoint "
            f"{self.savepoint_id}); a savepoint loads only into a fresh state location: "
            "restore it into a new one, or name the savepoint the state came from (or leave "
            "out restore_from) to go on with the state it has"
        )
        raise SavepointError(msg)

    def _check_batch(self, savepoint: Savepoint, spec: OperatorSpec, batch: int) -> None:
        """Task side: refuse to load the state of batch N into a query that goes on after
        another batch than N (a new checkpoint, whose first batch is 0, may start anywhere)."""
        if savepoint.batch < 0 or batch in (0, savepoint.batch + 1):
            return  # written from a table (no batch), the same checkpoint, or a new one
        if batch - 1 > savepoint.batch:
            skipped = _batches(savepoint.batch + 1, batch - 1)
            harm = f"the state would miss the records of {skipped}"
        else:
            harm = f"the records of {_batches(batch, savepoint.batch)} would be counted twice"
        positions = (
            f"the savepoint's ({self.path}/offsets/{savepoint.batch})"
            if savepoint.metadata.get("offsets") is not None
            else f"those of batch {savepoint.batch}"
        )
        msg = (
            f"operator '{spec.name}': savepoint {self.path} holds the state of batch "
            f"{savepoint.batch}, but this query goes on after batch {batch - 1}: {harm}. "
            "Restore a savepoint of the query's last committed batch (firesteel savepoint "
            f"create without --batch), or start a new checkpoint with the sources at {positions}"
        )
        raise SavepointError(msg)

    def _load(
        self,
        store: KeyedStateStore,
        part: OperatorSavepoint,
        declared: StateDeclarations,
        key_groups: list[int],
    ) -> None:
        loaders = restored_states(part, declared, self.allow_non_restored_state, self.path)
        rows = part.rows(KeyGroupRange(key_groups[0], key_groups[-1]))
        rows = rows.filter(pc.is_in(rows.column("key_group"), pa.array(key_groups, pa.int32())))
        columns = ("key_group", "key", "state", "user_key", "value")
        current: tuple[int, bytes] | None = None
        # A row group's worth of Python objects at a time, not the task's whole share.
        for chunk in rows.select(columns).to_batches(max_chunksize=_CHUNK):
            for key_group, key, state, user_key, value in zip(
                *(column.to_pylist() for column in chunk.columns), strict=True
            ):
                if state != TIMERS and state not in loaders:
                    continue
                if current != (key_group, key):
                    store.set_current_key(unpack_key(key), key_group)
                    current = (key_group, key)
                if state == TIMERS:
                    store.register_timer(int(unpack(user_key)))
                    continue
                desc, loads = loaders[state]
                _put(store, desc, user_key, loads(value))


def _batches(first: int, last: int) -> str:
    return f"batch {first}" if first == last else f"batches {first}-{last}"


def _put(store: KeyedStateStore, desc: StateDescriptor, user_key: Any, decoded: Any) -> None:
    if desc.kind is StateKind.VALUE:
        cast(ValueState, store.state(desc)).update(decoded)
    elif desc.kind is StateKind.LIST:
        cast(ListState, store.state(desc)).append(decoded)
    else:
        cast(MapState, store.state(desc)).put(unpack(user_key), decoded)


def restored_states(
    part: OperatorSavepoint,
    declared: StateDeclarations,
    allow_non_restored_state: bool,
    where: str,
) -> dict[str, tuple[StateDescriptor, Loader]]:
    """The declared descriptor of each of the savepoint's states, with how its stored values
    become values of the declared type: checked (kind, serializer, schema) before any value
    is read. A :class:`SavepointError` lists every state the job would drop unless it says
    so; a type changed in a way Avro does not resolve is refused naming the state, both
    types and the fix."""
    by_name = declared.by_name()
    dropped = set(declared.dropped)
    unclaimed = sorted(
        f"{info['kind']} state '{name}'"
        for name, info in part.states.items()
        if name != TIMERS and name not in by_name and name not in dropped
    )
    if unclaimed and not allow_non_restored_state:
        msg = (
            f"operator '{part.name}': savepoint {where} holds {', '.join(unclaimed)}, which the "
            "processor does not declare and would be dropped; declare them, call "
            "ctx.drop_state(name) in open() for each, or pass allow_non_restored_state=True"
        )
        raise SavepointError(msg)
    found: dict[str, tuple[StateDescriptor, Loader]] = {}
    for name, info in part.states.items():
        desc = by_name.get(name)
        if desc is not None and name != TIMERS:
            found[name] = (desc, _loader(part.name, name, info, desc, where))
    return found


def _loader(
    operator: str, name: str, info: Mapping[str, Any], desc: StateDescriptor, where: str
) -> Loader:
    """How the values the savepoint at ``where`` recorded as ``info`` become values of
    ``desc``: its kind and serializer must be the recorded ones, its type one they evolve to."""
    if desc.kind.value != info["kind"]:
        msg = (
            f"operator '{operator}': state '{name}' is a {info['kind']} state in savepoint "
            f"{where} but is declared as {desc.kind.value}"
        )
        raise SavepointError(msg)
    check_serializer(name, desc.value_serializer, info["serializer"], f"savepoint {where}")
    try:
        evolved = upgrade(
            operator,
            name,
            info.get("schema"),
            declared=desc.schema,
            serializer=desc.value_serializer,
            where=f"savepoint {where}",
        )
    except ConfigError as exc:
        raise SavepointError(str(exc)) from exc
    return desc.value_serializer.loads if evolved is None else evolved.loads
