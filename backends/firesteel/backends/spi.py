"""The state backend author's roles: what a backend (``firesteel-rocksdb``) implements.

Built on :mod:`firesteel.core.spi` (task identity, errors); the helpers a
backend may build with are :mod:`firesteel.backends.toolkit`'s and
:mod:`firesteel.core.toolkit`'s (durable records, ownership, per-worker cache).
These four are the only firesteel modules a separately installed backend
imports, besides the public user API (``firesteel.state``, ``firesteel.backends``).

The contract (the protocol itself is :mod:`firesteel.state.backend`'s):

- A :class:`StateBackend` is a picklable configuration; on an executor its
  :meth:`~StateBackend.open_store` returns a :class:`KeyedStateStore` for one
  :class:`KeyedTask` (the task's :class:`~firesteel.core.spi.TaskScope` and the
  :class:`KeyGroupRange` it owns), restored to the latest committed version
  before the task's batch. The operator is an :class:`OperatorSpec`, its states
  :class:`StateDescriptor` s (:class:`StateDeclarations`), each a
  :class:`ValueState`, :class:`ListState` or :class:`MapState` (:class:`StateKind`)
  of :data:`Key` s.
- Stores derive from :class:`TaskStore`, backends from :class:`TaskStoreBackend`,
  which opens each store with :meth:`TaskStore.open_task`: every backend makes
  the same decision about a failed ``begin`` (the store is discarded, the next
  task restores from storage) and keeps each worker's stores between tasks by
  one rule (:meth:`TaskStoreBackend.task_store`: a backend gives ``new_store``
  and ``store_key``).
- A store's snapshot is a :class:`PendingSnapshot`; batch N commits only after
  it is durable.
- A backend's ``stored_state(operator, batch)`` returns a :class:`StoredState`,
  what savepoints are made from: its ``key_groups`` yields one key group's
  :data:`KeyGroupEntries` (:data:`Entries`) at a time, reading as it goes.
"""

from firesteel.backends.inspect import Entries, KeyGroupEntries, StoredState
from firesteel.backends.store_base import TaskStore, TaskStoreBackend
from firesteel.state.api import ListState, MapState, ValueState
from firesteel.state.backend import (
    Key,
    KeyedStateStore,
    KeyedTask,
    OperatorSpec,
    PendingSnapshot,
    StateBackend,
    StateDeclarations,
)
from firesteel.state.descriptors import StateDescriptor, StateKind
from firesteel.state.keygroups import KeyGroupRange

__all__ = [
    "Entries",
    "Key",
    "KeyGroupEntries",
    "KeyGroupRange",
    "KeyedStateStore",
    "KeyedTask",
    "ListState",
    "MapState",
    "OperatorSpec",
    "PendingSnapshot",
    "StateBackend",
    "StateDeclarations",
    "StateDescriptor",
    "StateKind",
    "StoredState",
    "TaskStore",
    "TaskStoreBackend",
    "ValueState",
]
