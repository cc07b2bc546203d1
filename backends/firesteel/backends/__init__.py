"""State backends: where keyed state lives and where its snapshots go.

* :class:`HeapBackend` -- Python dicts, snapshots to local disk (development only);
* :class:`FilesystemBackend` -- Python dicts, snapshots to any pyarrow filesystem URI.

Both implement :class:`StateBackend`, as the RocksDB backend (distribution
``firesteel-rocksdb``) does.
"""

from firesteel.backends.heap.backends import FilesystemBackend, HeapBackend
from firesteel.state.backend import KeyedStateStore, OperatorSpec, StateBackend

__all__ = ["FilesystemBackend", "HeapBackend", "KeyedStateStore", "OperatorSpec", "StateBackend"]
