"""The state backend author's toolkit: helpers every backend shares, none it must implement.

The roles a backend implements are :mod:`firesteel.backends.spi`'s.

- :func:`check_owner`, :func:`check_declared` and :func:`undeclared_state`
  refuse recorded state that does not match, in the same words on every
  backend. A snapshot records each state as :func:`state_record` gives it;
  :func:`check_declared` returns the :class:`StateUpgrade` whose ``loads``
  reads values stored under an older schema (None when they load as they are).
- :class:`SnapshotThread` writes a snapshot off the task's thread.
- State values and keys are encoded with :func:`pack` / :func:`unpack` and
  :func:`key_packer` / :func:`unpack_key`, never pickled by default.
- :func:`read_stored` reads a stored file whole, a missing one named as
  corrupt state.
- :class:`SnapshotStorage` reads and writes the operator record
  (``_operator.json``) every backend keeps; :data:`SCHEMA`, :func:`to_table`,
  :func:`list_operators`, :func:`recorded_operator` and :func:`chosen_version`
  make a backend's state readable as a table; :func:`stored_table` turns a
  backend's stored state into that table.
"""

from firesteel.backends.async_snapshot import SnapshotThread
from firesteel.backends.inspect import (
    SCHEMA,
    chosen_version,
    list_operators,
    recorded_operator,
    stored_table,
    to_table,
)
from firesteel.backends.storage import SnapshotStorage, read_stored
from firesteel.backends.store_base import (
    check_declared,
    check_owner,
    state_record,
    undeclared_state,
)
from firesteel.state.schemas import StateUpgrade
from firesteel.state.serializers import key_packer, pack, unpack, unpack_key

__all__ = [
    "SCHEMA",
    "SnapshotStorage",
    "SnapshotThread",
    "StateUpgrade",
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
