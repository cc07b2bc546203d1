"""The keyed state primitives a processor uses: value, list and map.

Every state object is scoped to the *current key*: inside
``process(key, rows, state)`` or ``on_timer`` it reads and writes the entry of
that key only. Backends implement these interfaces (the heap and filesystem
backends with Python dicts; a RocksDB backend would implement them over its
column families).

Traps:

* Values returned by ``value()``/``get()`` are the stored objects themselves
  on in-memory backends; mutating one in place does not mark it changed.
  Call ``update``/``put`` with the new value.
* ``None`` is not a storable value: ``update(None)`` clears the entry.
* Expired (TTL) entries are invisible at once, whatever the backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from typing import Any


class ValueState(ABC):
    """One value per key (Flink's ``ValueState``)."""

    @abstractmethod
    def value(self) -> Any:
        """The current key's value, or None when it has none (or it expired)."""

    @abstractmethod
    def update(self, value: Any) -> None:
        """Set the current key's value; ``None`` clears it."""

    @abstractmethod
    def clear(self) -> None:
        """Remove the current key's value."""


class ListState(ABC):
    """A list per key; :meth:`append` never rewrites the list, in memory or in a delta snapshot."""

    @abstractmethod
    def get(self) -> list[Any]:
        """A new list of the current key's live elements (empty when none)."""

    @abstractmethod
    def append(self, value: Any) -> None:
        """Append one element (O(1))."""

    @abstractmethod
    def extend(self, values: Iterable[Any]) -> None:
        """Append several elements."""

    @abstractmethod
    def update(self, values: Iterable[Any]) -> None:
        """Replace the whole list (an empty iterable clears it)."""

    @abstractmethod
    def clear(self) -> None:
        """Remove the current key's list."""

    @abstractmethod
    def __len__(self) -> int:
        """Number of live elements."""

    def __iter__(self) -> Iterator[Any]:
        return iter(self.get())


class MapState(ABC):
    """A map per key with per-entry access (Flink's ``MapState``)."""

    @abstractmethod
    def get(self, user_key: Any, default: Any = None) -> Any:
        """The value stored under ``user_key``, or ``default``."""

    @abstractmethod
    def put(self, user_key: Any, value: Any) -> None:
        """Store one entry; ``None`` removes it."""

    @abstractmethod
    def remove(self, user_key: Any) -> None:
        """Remove one entry (no error when absent)."""

    @abstractmethod
    def contains(self, user_key: Any) -> bool:
        """Whether ``user_key`` has a live entry."""

    @abstractmethod
    def items(self) -> list[tuple[Any, Any]]:
        """A new list of the live ``(user_key, value)`` pairs."""

    @abstractmethod
    def clear(self) -> None:
        """Remove the current key's whole map."""

    def put_all(self, entries: Mapping[Any, Any]) -> None:
        """Store several entries."""
        for user_key, value in entries.items():
            self.put(user_key, value)

    def keys(self) -> list[Any]:
        """The live user keys."""
        return [user_key for user_key, _ in self.items()]

    def values(self) -> list[Any]:
        """The live values."""
        return [value for _, value in self.items()]

    def is_empty(self) -> bool:
        """Whether the current key has no live entry."""
        return not self.items()

    def __len__(self) -> int:
        return len(self.items())

    def __contains__(self, user_key: object) -> bool:
        return self.contains(user_key)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())
