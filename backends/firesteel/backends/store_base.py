"""What the backends' keyed stores share: the task lifecycle, and the checks of recorded state.

Every backend opens a task through :meth:`TaskStore.open_task`, so they make one
decision about a failed :meth:`TaskStore.begin`: the store is discarded (a
begin that failed half way may hold a half-restored state), and the next task
restores from storage.

Both the heap store and the RocksDB store record an operator's identity once
(``_operator.json``: query, key columns, max parallelism, first batch) and the
kind, serializer and value schema of every state in each snapshot
(:func:`state_record`); a restart that does not match fails with a
:class:`~firesteel.core.errors.ConfigError` naming what changed, the same words
on every backend, and a value schema that evolved by Avro's rules is resolved
(:mod:`firesteel.state.schemas`).
"""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self, cast

import pyarrow as pa

from firesteel.core.spi import ConfigError
from firesteel.core.toolkit import (
    Ownership,
    StorageConfig,
    WorkerCache,
    check_location,
    make_parent,
    resolve,
)
from firesteel.state.api import ListState, MapState, ValueState
from firesteel.state.backend import (
    KeyedStateStore,
    KeyedTask,
    OperatorSpec,
    StateBackend,
    StateDeclarations,
)
from firesteel.state.descriptors import StateDescriptor
from firesteel.state.schemas import StateUpgrade, recorded, upgrade

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
from firesteel.state.serializers import check_serializer


class TaskStore(KeyedStateStore):
    """A keyed store that serves one task at a time (the base of the backends' stores).

    ``begin`` sets ``descriptors`` (name -> declared descriptor), ``_states``
    (name -> bound state object) and ``_task``; ``_metadata`` is the operator
    record once read.
    """

    def __init__(self, spec: OperatorSpec, cursor: Any, *, retain: int) -> None:
        """``cursor``: the backend's shared state cursor (with ``now_ms``); ``retain``: the
        committed versions kept in storage."""
        self.spec = spec
        self.cursor = cursor
        self.retain = retain
        self.descriptors: dict[str, StateDescriptor] = {}
        self._states: dict[str, Any] = {}
        self._metadata: dict[str, Any] | None = None
        self._task: KeyedTask | None = None

    @abstractmethod
    def begin(self, task: KeyedTask, declared: StateDeclarations, now_ms: int) -> None:
        """Start ``task``: check ownership, restore version < batch id, declare states."""

    def open_task(self, task: KeyedTask, declared: StateDeclarations, now_ms: int) -> TaskStore:
        """:meth:`begin` ``task``; if it fails, :meth:`discard` the store and re-raise."""
        try:
            self.begin(task, declared, now_ms)
        except BaseException:
            self.discard()
            raise
        return self

    def close(self) -> None:
        """Release what the store holds besides memory (a native instance, local files);
        called when the worker's cache of stores drops it. Nothing by default."""

    @property
    def now_ms(self) -> int:
        return int(self.cursor.now_ms)

    @now_ms.setter
    def now_ms(self, value: int) -> None:
        self.cursor.now_ms = value

    @property
    def task(self) -> KeyedTask:
        """The running task (set by ``begin``)."""
        if self._task is None:
            msg = "state store used outside a task"
            raise RuntimeError(msg)
        return self._task

    @property
    def first_batch(self) -> int:
        """The batch at which this operator's state began."""
        assert self._metadata is not None
        return int(self._metadata["first_batch"])

    def state(self, descriptor: StateDescriptor) -> ValueState | ListState | MapState:
        found: ValueState | ListState | MapState | None = self._states.get(descriptor.name)
        if found is None:
            msg = (
                f"operator '{self.spec.name}': state '{descriptor.name}' was not declared; "
                "declare descriptors as class attributes of the processor or with "
                "ctx.declare(...) in open()"
            )
            raise ConfigError(msg)
        return found


class TaskStoreBackend(StateBackend):
    """A backend whose stores are :class:`TaskStore` objects, opened through
    :meth:`TaskStore.open_task` (so a failed ``begin`` discards the store on every backend).

    Subclasses are frozen dataclasses with the fields ``path`` (the location),
    ``retain``, ``cache`` and ``storage_options`` (made a :class:`StorageConfig`
    when built), and give :attr:`worker_stores` its capacity.
    """

    path: str
    retain: int
    """Committed versions kept in storage."""
    cache: bool
    """Keep each store in its Python worker between tasks (see :meth:`task_store`)."""
    storage_options: StorageConfig | Mapping[str, str]
    worker_stores: ClassVar[WorkerCache[Hashable, TaskStore]]
    """The stores this Python worker keeps between tasks, by :meth:`store_key`."""

    @property
    def location(self) -> str:
        return self.path

    location_role: ClassVar[str] = "snapshot"
    """What the location holds, for error messages ("snapshot", "checkpoint")."""

    @property
    def _storage_config(self) -> StorageConfig:
        assert isinstance(self.storage_options, StorageConfig)
        return self.storage_options

    def with_session(self, settings: Mapping[str, str]) -> Self:
        changed: Any = dataclasses.replace(  # type: ignore[type-var]
            self, storage_options=self._storage_config.under(settings)
        )
        return cast(Self, changed)

    def validate(self) -> None:
        """The location resolves, its store answers, and its folder can be made."""
        location = resolve(self.location, self._storage_config)
        check_location(location, self._storage_config)
        try:
            make_parent(location.filesystem, f"{location.path}/")
        except (OSError, pa.ArrowException) as exc:
            msg = (
                f"{self.name} backend: cannot use {self.location_role} location "
                f"{self.location!r}: {exc}"
            )
            raise ConfigError(msg) from exc

    def on_built(self, session: SparkSession, operator: str) -> None:
        """Take ``firesteel savepoint stop`` requests for the session's queries and clean up
        after them (:mod:`firesteel.backends.control`); a Spark Connect client cannot tell a
        query's checkpoint, so its sessions do not."""
        from firesteel.backends.control import accept_stop_requests

        if hasattr(session, "_jsparkSession"):
            accept_stop_requests(session, self.location, operator, self._storage_config)

    def open_store(
        self, spec: OperatorSpec, task: KeyedTask, declared: StateDeclarations, now_ms: int
    ) -> KeyedStateStore:
        return self.task_store(spec, task).open_task(task, declared, now_ms)

    def task_store(self, spec: OperatorSpec, task: KeyedTask) -> TaskStore:
        """Executor side: the store to serve ``task``, not yet begun.

        With ``cache``, the one this worker keeps under :meth:`store_key` (so a
        task whose key groups it served last restores nothing), unless it was
        made for another ``max_parallelism``: its key groups hash other keys, so
        it is dropped and a new one made. A kept store takes ``spec`` and
        ``retain`` as they are now (parallelism may change between tasks).
        """
        if not self.cache:
            return self.new_store(spec, task)
        store = self.worker_stores.get(
            self.store_key(spec, task),
            lambda: self.new_store(spec, task),
            usable=lambda kept: kept.spec.max_parallelism == spec.max_parallelism,
        )
        store.spec = spec
        store.retain = self.retain
        return store

    @abstractmethod
    def new_store(self, spec: OperatorSpec, task: KeyedTask) -> TaskStore:
        """A new store to serve ``task`` (nothing restored yet)."""

    @abstractmethod
    def store_key(self, spec: OperatorSpec, task: KeyedTask) -> Hashable:
        """What a store kept in :attr:`worker_stores` for ``task`` is found by."""


def check_owner(meta: dict[str, Any], spec: OperatorSpec, task: KeyedTask, where: str) -> None:
    """The operator record at ``where`` must be this query's, keyed and sized as ``spec``."""
    Ownership(
        subject=f"operator '{spec.name}': the state at {where}",
        query_id=task.scope.query_id or None,
        remedy="Restart from the original checkpoint, or give this query a fresh state "
        "location or operator name",
    ).check(meta.get("query_id"))
    if int(meta["max_parallelism"]) != spec.max_parallelism:
        msg = (
            f"operator '{spec.name}': max_parallelism={spec.max_parallelism}, but its state "
            f"at {where} has {meta['max_parallelism']} key groups; max_parallelism cannot "
            "change for existing state (parallelism can)"
        )
        raise ConfigError(msg)
    if list(meta.get("key", [])) != list(spec.key_columns):
        msg = (
            f"operator '{spec.name}': key columns {list(spec.key_columns)} differ from "
            f"{meta.get('key')} recorded at {where}; state cannot be re-keyed"
        )
        raise ConfigError(msg)
    if task.scope.batch_id < int(meta["first_batch"]):
        msg = (
            f"operator '{spec.name}': batch {task.scope.batch_id} precedes the first batch "
            f"{meta['first_batch']} recorded at {where}; the state belongs to another run"
        )
        raise ConfigError(msg)


def undeclared_state(operator: str, name: str, info: dict[str, str], where: str) -> ConfigError:
    """The error for stored state ``name`` that the processor neither declares nor drops."""
    msg = (
        f"operator '{operator}': {where} holds {info['kind']} state '{name}', which the "
        "processor does not declare; declare its descriptor, or call "
        f"ctx.drop_state('{name}') in open() to discard it"
    )
    return ConfigError(msg)


def state_record(desc: StateDescriptor) -> dict[str, str]:
    """What a snapshot records of a state: its kind, serializer and value schema (JSON)."""
    return {
        "kind": desc.kind.value,
        "serializer": desc.value_serializer.name,
        "schema": recorded(desc.schema),
    }


def check_declared(
    operator: str, name: str, info: dict[str, str], desc: StateDescriptor, where: str
) -> StateUpgrade | None:
    """A stored state's kind and serializer must match its declared descriptor, and its
    recorded schema must resolve to the declared one: None when its values load as they
    are, else the :class:`StateUpgrade` that converts them."""
    if desc.kind.value != info["kind"]:
        msg = (
            f"operator '{operator}': state '{name}' is a {info['kind']} state in "
            f"{where} but is declared as {desc.kind.value}"
        )
        raise ConfigError(msg)
    check_serializer(name, desc.value_serializer, info["serializer"], where)
    return upgrade(
        operator,
        name,
        info.get("schema"),
        declared=desc.schema,
        serializer=desc.value_serializer,
        where=where,
    )
