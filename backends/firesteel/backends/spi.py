"""The state backend author's interface: what a backend (``firesteel-rocksdb``) may rely on.

Built on :mod:`firesteel.core.spi` (task identity, errors) and
:mod:`firesteel.core.toolkit` (durable records, ownership, per-worker cache),
which a backend imports beside this module; the three are the only firesteel
modules a separately installed backend imports, besides the public user API
(``firesteel.state``, ``firesteel.backends``).

The contract (the protocol itself is :mod:`firesteel.state.backend`'s):

- A :class:`StateBackend` is a picklable configuration; on an executor its
  :meth:`~StateBackend.open_store` returns a :class:`KeyedStateStore` for one
  :class:`KeyedTask` (the task's :class:`~firesteel.core.spi.TaskScope` and the
  :class:`KeyGroupRange` it owns), restored to the latest committed version
  before the task's batch.
- Stores derive from :class:`TaskStore`, backends from :class:`TaskStoreBackend`,
  which opens each store with :meth:`TaskStore.open_task`: every backend makes
  the same decision about a failed ``begin`` (the store is discarded, the next
  task restores from storage), keeps each worker's stores between tasks by one
  rule (:meth:`TaskStoreBackend.task_store`: a backend gives ``new_store`` and
  ``store_key``), and :func:`check_owner`, :func:`check_declared` and
  :func:`undeclared_state` refuse recorded state that does not match, in the
  same words on every backend. A snapshot records each state as
  :func:`state_record` gives it; :func:`check_declared` returns the
  :class:`StateUpgrade` whose ``loads`` reads values stored under an older
  schema (None when they load as they are).
- A snapshot is written by :class:`SnapshotThread` (a
  :class:`PendingSnapshot`); batch N commits only after it is durable.
- State values and keys are encoded with :func:`pack` / :func:`unpack` and
  :func:`key_packer` / :func:`unpack_key`, never pickled by default.
- :func:`read_stored` reads a stored file whole, a missing one named as
  corrupt state.
- :class:`SnapshotStorage` reads and writes the operator record
  (``_operator.json``) every backend keeps; :data:`SCHEMA`, :func:`to_table`,
  :func:`list_operators`, :func:`recorded_operator` and :func:`chosen_version`
  make a backend's state readable as a table; a backend's ``stored_state(operator,
  batch)`` returning a :class:`StoredState` (``stored_table`` turns it into that
  table) is what savepoints are made from: its ``key_groups`` yields one key
  group's :data:`KeyGroupEntries` at a time, reading as it goes.
"""

from firesteel.backends.async_snapshot import SnapshotThread
from firesteel.backends.inspect import (
    SCHEMA,
    Entries,
    KeyGroupEntries,
    StoredState,
    chosen_version,
    list_operators,
    recorded_operator,
    stored_table,
    to_table,
)
from firesteel.backends.storage import SnapshotStorage, read_stored
from firesteel.backends.store_base import (
    TaskStore,
    TaskStoreBackend,
    check_declared,
    check_owner,
    state_record,
    undeclared_state,
)
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
from firesteel.state.schemas import StateUpgrade
from firesteel.state.serializers import key_packer, pack, unpack, unpack_key

__all__ = [
    "SCHEMA",
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
    "SnapshotStorage",
    "SnapshotThread",
    "StateBackend",
    "StateDeclarations",
    "StateDescriptor",
    "StateKind",
    "StateUpgrade",
    "StoredState",
    "TaskStore",
    "TaskStoreBackend",
    "ValueState",
    "check_declared",
    "check_owner",
    "chosen_version",
    "key_packer",
    "list_operators",
    "pack",
    "read_stored",
    "recorded_operator",
    "state_record",
    "stored_table",
    "to_table",
    "undeclared_state",
    "unpack",
    "unpack_key",
]
