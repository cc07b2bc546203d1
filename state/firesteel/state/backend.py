"""The state backend interface: where keyed state lives while a task runs, and where it goes.

A :class:`StateBackend` is a small picklable configuration object created on
the driver; on each executor task it opens a :class:`KeyedStateStore` for the
key groups of that task. The protocol, per task of batch N (see
:mod:`firesteel.state.operator` for the caller):

1. :meth:`StateBackend.open_store` restores the key groups to the latest
   committed version < N. Every batch < N has committed when batch N runs
   (Spark runs batches in order and re-runs a failed batch before the next), so
   "latest < N" is committed state, and a re-run of N never sees what a failed
   attempt of N wrote.
2. The operator reads and writes state through :meth:`KeyedStateStore.state`
   objects bound to the current key (:meth:`KeyedStateStore.set_current_key`).
3. :meth:`KeyedStateStore.snapshot` writes version N; the task returns only
   after :meth:`PendingSnapshot.wait`, so batch N cannot commit without it.
4. On any failure :meth:`KeyedStateStore.discard` forgets in-memory changes.

The heap and filesystem backends keep state in Python dicts
(:mod:`firesteel.backends.heap.states`); the RocksDB backend (distribution
``firesteel-rocksdb``) implements the same two classes over a local RocksDB and
its checkpoints.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from firesteel.core.spi import TaskScope
from firesteel.state.api import ListState, MapState, ValueState
from firesteel.state.descriptors import StateDescriptor
from firesteel.state.keygroups import KeyGroupRange

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Key = tuple[Any, ...]
"""A grouping key: the values of the key columns, in order."""


@dataclass(frozen=True)
class OperatorSpec:
    """What identifies a stateful operator's state across restarts."""

    name: str
    """Unique per query; names the operator's folder in the backend."""
    key_columns: tuple[str, ...]
    max_parallelism: int
    parallelism: int


@dataclass(frozen=True)
class KeyedTask:
    """The task a store is opened for: its identity and the key groups it owns."""

    scope: TaskScope
    """Which task this is (query, batch, partition, attempt): the one task identity."""
    key_groups: KeyGroupRange
    """The key groups operator partition ``scope.partition_id`` owns."""


@dataclass(frozen=True)
class StateDeclarations:
    """The states a processor declared for a task, and the stored states it asked to drop."""

    descriptors: Sequence[StateDescriptor]
    dropped: Collection[str] = ()
    """States found in snapshots to discard; any other undeclared stored state is an error."""

    def by_name(self) -> dict[str, StateDescriptor]:
        """The declared descriptors by state name."""
        return {d.name: d for d in self.descriptors}


class PendingSnapshot(ABC):
    """A snapshot being written; :meth:`wait` returns once it is durable."""

    @abstractmethod
    def wait(self) -> None:
        """Block until the snapshot is durable; re-raise whatever made it fail."""


class KeyedStateStore(ABC):
    """The state of one task's key groups (executor side, one task at a time)."""

    now_ms: int
    """Processing time of the running batch, in epoch milliseconds (TTL and timers use it)."""

    @abstractmethod
    def state(self, descriptor: StateDescriptor) -> ValueState | ListState | MapState:
        """The state object for ``descriptor``, bound to the current key (created once)."""

    @abstractmethod
    def set_current_key(self, key: Key, key_group: int) -> None:
        """Make ``key`` (in ``key_group``) the key every state object reads and writes."""

    @abstractmethod
    def register_timer(self, timestamp_ms: int) -> None:
        """Add a processing-time timer for the current key (idempotent per timestamp)."""

    @abstractmethod
    def delete_timer(self, timestamp_ms: int) -> None:
        """Remove a timer of the current key (no error when absent)."""

    @abstractmethod
    def timers(self) -> list[int]:
        """The current key's pending timers, ascending."""

    @abstractmethod
    def pop_due_timers(self, now_ms: int) -> list[tuple[int, int, Key]]:
        """Remove and return ``(timestamp, key_group, key)`` of every timer due at ``now_ms``,
        in timestamp order."""

    @abstractmethod
    def snapshot(self) -> PendingSnapshot:
        """Start writing the version of the running batch (may run in a background thread)."""

    @abstractmethod
    def discard(self) -> None:
        """The task failed: forget every in-memory change it made."""

    def snapshot_metrics(self) -> dict[str, float]:
        """Figures of the snapshot the last :meth:`PendingSnapshot.wait` made durable, for
        the batch's record (:mod:`firesteel.core.metrics.history`): ``snapshot_bytes``
        written to storage and, where the backend knows them without reading its state,
        ``state_bytes`` (the bytes the version consists of, written now or before) and
        ``state_entries`` (values held, summed over the processor's states). None by
        default."""
        return {}


class StateBackend(ABC):
    """Configuration of where state lives; picklable, created on the driver."""

    name: str
    """``heap``, ``filesystem``..."""

    @property
    @abstractmethod
    def location(self) -> str:
        """Where snapshots are written (a local path or a URI)."""

    def validate(self) -> None:
        """Driver side, when the operator is built: refuse a configuration that cannot work."""

    def with_session(self, settings: Mapping[str, str]) -> StateBackend:
        """This backend with the session's ``spark.hadoop.fs.*`` ``settings`` beneath its own
        storage options (driver side, when the operator is built; its own settings win).

        A backend that reaches no object store returns itself.
        """
        return self

    def on_built(self, session: SparkSession, operator: str) -> None:
        """Driver side, once ``operator`` is built from ``session``: what the backend does
        for the queries that will run it (the built-in backends take stop-with-savepoint
        requests, :mod:`firesteel.backends.control`). Nothing by default."""

    def recorded_parallelism(self, operator: str) -> int | None:
        """Driver side: the parallelism the newest snapshot of ``operator`` was written with.

        None for an operator without state yet (or a backend that cannot tell).
        """
        return None

    @abstractmethod
    def open_store(
        self, spec: OperatorSpec, task: KeyedTask, declared: StateDeclarations, now_ms: int
    ) -> KeyedStateStore:
        """Executor side: the store of ``task``'s key groups, restored to version < batch id,
        serving the ``declared`` states at processing time ``now_ms``."""

    @abstractmethod
    def inspect(self, operator: str | None = None, batch: int | None = None) -> pa.Table:
        """The state of ``operator`` (every operator when None) at version ``batch``
        (the latest complete one when None), one row per entry; see
        :func:`firesteel.backends.inspect.read_state`."""
