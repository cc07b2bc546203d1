"""What a Python worker keeps between tasks: sessions, stores, shared memory, folders.

Spark reuses its Python workers across tasks and batches, so anything costly
to build (a Cassandra session, a RocksDB instance, a restored heap store) is
built once per worker and key and handed to later tasks. Every such cache is a
:class:`WorkerCache`: one lock, one policy for replacing an entry that no
longer fits, and an optional bound that closes the least recently used entry.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _keep(_value: object) -> bool:
    return True


def _leave(_value: object) -> None:
    """Values that hold nothing to release."""


class WorkerCache(Generic[K, V]):
    """Values of one kind this worker keeps between tasks, one per key.

    ``capacity`` bounds the entries (None: unbounded); beyond it the least
    recently used one is closed with ``close``, which also closes an entry
    that :meth:`get` replaces. Thread-safe: a value is created under the
    cache's lock, so two tasks of one worker never build the same one twice.
    """

    def __init__(self, *, capacity: int | None = None, close: Callable[[V], None] = _leave) -> None:
        self._entries: dict[K, V] = {}
        self._lock = threading.Lock()
        self._capacity = capacity
        self._close = close

    def get(self, key: K, create: Callable[[], V], *, usable: Callable[[V], bool] = _keep) -> V:
        """The value of ``key``: the kept one if ``usable(value)``, else a new one from
        ``create()`` (the unusable one is closed)."""
        with self._lock:
            found = self._entries.pop(key, None)
            if found is not None and not usable(found):
                self._close(found)
                found = None
            if found is None:
                found = create()
            self._entries[key] = found
            while self._capacity is not None and len(self._entries) > self._capacity:
                self._close(self._entries.pop(next(iter(self._entries))))
            return found

    def __len__(self) -> int:
        return len(self._entries)
