"""Keyed state in Python dicts: the state objects and the per-key-group tables behind them.

Both the heap and the filesystem backend keep state here; they differ only in
where :class:`DictKeyedStore` writes its snapshots.

Layout: one :class:`KeyGroupState` per key group, holding one :class:`Slot`
(a dict keyed by grouping key, plus what changed since the last snapshot) per
declared state, and the key group's timers. A state object is rebound to the
current key's slot on every key switch, so an operation is a dict access and
a set insert.

Entries with a TTL are stored as ``(value, expires_ms)``; without one as the
bare value (a separate, faster class). Change tracking feeds delta snapshots:

* value: keys written or cleared -> ``PUT`` / ``DELETE``;
* list: keys appended to since the last snapshot and where the new elements
  start -> ``APPEND`` rows for the new elements only; keys rewritten
  (``update``, ``clear``, TTL expiry) -> ``CLEAR`` + ``APPEND`` of the list;
* map: ``(key, user key)`` pairs written or removed -> ``PUT`` / ``DELETE``;
  keys cleared -> ``CLEAR`` + ``PUT`` of what is left;
* timers: keys whose timers changed -> ``CLEAR`` + ``PUT`` of their timers.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from typing import Any

from firesteel.backends import format as fmt
from firesteel.backends.base import Key
from firesteel.state.api import ListState, MapState, ValueState
from firesteel.state.descriptors import StateDescriptor, StateKind
from firesteel.state.serializers import Serializer, pack, pack_key, unpack

_MISSING = object()
TIMERS = "__timers__"
"""The reserved state name under which timers are snapshotted."""

_sequence = itertools.count()


class Slot:
    """The entries of one state in one key group, and what changed since the last snapshot."""

    __slots__ = ("appended_from", "changed", "cleared", "table")

    def __init__(self) -> None:
        self.table: dict[Any, Any] = {}
        self.changed: set[Any] = set()
        self.appended_from: dict[Any, int] = {}
        self.cleared: set[Any] = set()

    def reset_changes(self) -> None:
        """Forget the change log (after a snapshot captured it). Keeps the set objects."""
        self.changed.clear()
        self.appended_from.clear()
        self.cleared.clear()


class KeyGroupState:
    """All state of one key group: a slot per state name, and the timers."""

    __slots__ = ("slots", "timer_heap", "timers")

    def __init__(self, names: Iterable[str]) -> None:
        self.slots: dict[str, Slot] = {name: Slot() for name in names}
        self.timers = Slot()
        self.timer_heap: list[tuple[int, int, Key]] = []

    def ensure(self, names: Iterable[str]) -> None:
        """Add empty slots for states declared after this group was created."""
        for name in names:
            if name not in self.slots:
                self.slots[name] = Slot()

    def add_timer(self, key: Key, timestamp: int) -> bool:
        """Add a timer; False when it already existed."""
        pending = self.timers.table.get(key)
        if pending is None:
            pending = self.timers.table[key] = set()
        elif timestamp in pending:
            return False
        pending.add(timestamp)
        heapq.heappush(self.timer_heap, (timestamp, next(_sequence), key))
        return True


class Clock:
    """The processing time of the running batch, shared by every state object of a store."""

    __slots__ = ("now_ms",)

    def __init__(self) -> None:
        self.now_ms = 0


# -- value -------------------------------------------------------------------------------


class HeapValueState(ValueState):
    """A value per key, without TTL."""

    __slots__ = ("_changed", "_check", "_clock", "_desc", "_key", "_table")

    def __init__(self, descriptor: StateDescriptor, clock: Clock) -> None:
        self._desc = descriptor
        self._clock = clock
        self._check = descriptor.type is not None
        self._table: dict[Any, Any] = {}
        self._changed: set[Any] = set()
        self._key: Key = ()

    def bind(self, slot: Slot, key: Key) -> None:
        """Point this object at ``key`` in ``slot`` (called on every key switch)."""
        self._table = slot.table
        self._changed = slot.changed
        self._key = key

    def value(self) -> Any:
        return self._table.get(self._key)

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
            return
        if self._check:
            self._desc.check_type(value)
        self._table[self._key] = value
        self._changed.add(self._key)

    def clear(self) -> None:
        if self._table.pop(self._key, _MISSING) is not _MISSING:
            self._changed.add(self._key)


class HeapValueStateTtl(HeapValueState):
    """A value per key whose entries expire (stored as ``(value, expires_ms)``)."""

    __slots__ = ("_refresh", "_ttl")

    def __init__(self, descriptor: StateDescriptor, clock: Clock) -> None:
        super().__init__(descriptor, clock)
        ttl = descriptor.ttl_config
        assert ttl is not None
        self._ttl = ttl.millis
        self._refresh = ttl.refresh_on_read

    def value(self) -> Any:
        entry = self._table.get(self._key)
        if entry is None:
            return None
        now = self._clock.now_ms
        if entry[1] <= now:
            del self._table[self._key]
            self._changed.add(self._key)
            return None
        if self._refresh:
            self._table[self._key] = (entry[0], now + self._ttl)
            self._changed.add(self._key)
        return entry[0]

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
            return
        if self._check:
            self._desc.check_type(value)
        self._table[self._key] = (value, self._clock.now_ms + self._ttl)
        self._changed.add(self._key)


# -- list --------------------------------------------------------------------------------


class HeapListState(ListState):
    """A list per key; with a TTL each element is ``(value, expires_ms)``."""

    __slots__ = ("_appended", "_changed", "_check", "_clock", "_desc", "_key", "_table", "_ttl")

    def __init__(self, descriptor: StateDescriptor, clock: Clock) -> None:
        self._desc = descriptor
        self._clock = clock
        self._check = descriptor.type is not None
        ttl = descriptor.ttl_config
        self._ttl = ttl.millis if ttl else None
        self._table: dict[Any, list[Any]] = {}
        self._changed: set[Any] = set()
        self._appended: dict[Any, int] = {}
        self._key: Key = ()

    def bind(self, slot: Slot, key: Key) -> None:
        """Point this object at ``key`` in ``slot``."""
        self._table = slot.table
        self._changed = slot.changed
        self._appended = slot.appended_from
        self._key = key

    def _live(self) -> list[Any]:
        """The stored list with expired elements removed (a rewrite, when any expired)."""
        stored = self._table.get(self._key)
        if stored is None:
            return []
        if self._ttl is None:
            return stored
        now = self._clock.now_ms
        if all(expires > now for _, expires in stored):
            return stored
        kept = [entry for entry in stored if entry[1] > now]
        self._rewrite(kept)
        return kept

    def _rewrite(self, entries: list[Any]) -> None:
        if entries:
            self._table[self._key] = entries
        else:
            self._table.pop(self._key, None)
        self._changed.add(self._key)
        self._appended.pop(self._key, None)

    def get(self) -> list[Any]:
        live = self._live()
        if self._ttl is None:
            return list(live)
        return [value for value, _ in live]

    def __len__(self) -> int:
        return len(self._live())

    def append(self, value: Any) -> None:
        if self._check:
            self._desc.check_type(value)
        key = self._key
        stored = self._table.get(key)
        if stored is None:
            stored = self._table[key] = []
        if key not in self._appended and key not in self._changed:
            self._appended[key] = len(stored)
        stored.append(value if self._ttl is None else (value, self._clock.now_ms + self._ttl))

    def extend(self, values: Iterable[Any]) -> None:
        for value in values:
            self.append(value)

    def update(self, values: Iterable[Any]) -> None:
        items = list(values)
        if self._check:
            for value in items:
                self._desc.check_type(value)
        if self._ttl is not None:
            expires = self._clock.now_ms + self._ttl
            items = [(value, expires) for value in items]
        self._rewrite(items)

    def clear(self) -> None:
        if self._key in self._table:
            self._rewrite([])


# -- map ---------------------------------------------------------------------------------


class HeapMapState(MapState):
    """A map per key; with a TTL each entry is ``(value, expires_ms)``."""

    __slots__ = ("_changed", "_check", "_cleared", "_clock", "_desc", "_key", "_table", "_ttl")

    def __init__(self, descriptor: StateDescriptor, clock: Clock) -> None:
        self._desc = descriptor
        self._clock = clock
        self._check = descriptor.type is not None
        ttl = descriptor.ttl_config
        self._ttl = ttl.millis if ttl else None
        self._table: dict[Any, dict[Any, Any]] = {}
        self._changed: set[Any] = set()
        self._cleared: set[Any] = set()
        self._key: Key = ()

    def bind(self, slot: Slot, key: Key) -> None:
        """Point this object at ``key`` in ``slot``."""
        self._table = slot.table
        self._changed = slot.changed
        self._cleared = slot.cleared
        self._key = key

    def _remove_entry(self, entries: dict[Any, Any], user_key: Any) -> None:
        del entries[user_key]
        self._changed.add((self._key, user_key))
        if not entries:
            del self._table[self._key]

    def get(self, user_key: Any, default: Any = None) -> Any:
        entries = self._table.get(self._key)
        if entries is None:
            return default
        entry = entries.get(user_key, _MISSING)
        if entry is _MISSING:
            return default
        if self._ttl is None:
            return entry
        if entry[1] <= self._clock.now_ms:
            self._remove_entry(entries, user_key)
            return default
        return entry[0]

    def put(self, user_key: Any, value: Any) -> None:
        if value is None:
            self.remove(user_key)
            return
        if self._check:
            self._desc.check_type(value)
        entries = self._table.get(self._key)
        if entries is None:
            entries = self._table[self._key] = {}
        entries[user_key] = value if self._ttl is None else (value, self._clock.now_ms + self._ttl)
        self._changed.add((self._key, user_key))

    def remove(self, user_key: Any) -> None:
        entries = self._table.get(self._key)
        if entries is not None and user_key in entries:
            self._remove_entry(entries, user_key)

    def contains(self, user_key: Any) -> bool:
        return self.get(user_key, _MISSING) is not _MISSING

    def items(self) -> list[tuple[Any, Any]]:
        entries = self._table.get(self._key)
        if not entries:
            return []
        if self._ttl is None:
            return list(entries.items())
        now = self._clock.now_ms
        expired = [user_key for user_key, (_, expires) in entries.items() if expires <= now]
        for user_key in expired:
            self._remove_entry(entries, user_key)
        return [(user_key, value) for user_key, (value, _) in entries.items()]

    def clear(self) -> None:
        if self._table.pop(self._key, None) is not None:
            self._cleared.add(self._key)

    def __len__(self) -> int:
        return len(self.items())


BoundState = HeapValueState | HeapListState | HeapMapState


def make_state(descriptor: StateDescriptor, clock: Clock) -> BoundState:
    """The state object class for ``descriptor``'s kind and TTL."""
    if descriptor.kind is StateKind.VALUE:
        if descriptor.ttl_config is None:
            return HeapValueState(descriptor, clock)
        return HeapValueStateTtl(descriptor, clock)
    if descriptor.kind is StateKind.LIST:
        return HeapListState(descriptor, clock)
    return HeapMapState(descriptor, clock)


# -- snapshot rows -----------------------------------------------------------------------


class RowBuffer:
    """Columns of a snapshot body being built (see :data:`firesteel.backends.format.BODY_SCHEMA`)."""

    def __init__(self) -> None:
        self.key_group: list[int] = []
        self.state: list[str] = []
        self.op: list[int] = []
        self.key: list[bytes] = []
        self.user_key: list[bytes | None] = []
        self.value: list[bytes | None] = []
        self.expires: list[int | None] = []

    def add(
        self,
        key_group: int,
        state: str,
        op: int,
        key: bytes,
        user_key: bytes | None = None,
        value: bytes | None = None,
        expires: int | None = None,
    ) -> None:
        """Append one row."""
        self.key_group.append(key_group)
        self.state.append(state)
        self.op.append(op)
        self.key.append(key)
        self.user_key.append(user_key)
        self.value.append(value)
        self.expires.append(expires)

    def __len__(self) -> int:
        return len(self.op)

    def to_table(self) -> Any:
        """The rows as an Arrow table of the body schema."""
        import pyarrow as pa

        return pa.table(
            [
                pa.array(self.key_group, pa.int16()),
                pa.array(self.state, pa.string()).dictionary_encode().cast(
                    pa.dictionary(pa.int16(), pa.string())
                ),
                pa.array(self.op, pa.int8()),
                pa.array(self.key, pa.binary()),
                pa.array(self.user_key, pa.binary()),
                pa.array(self.value, pa.binary()),
                pa.array(self.expires, pa.int64()),
            ],
            schema=fmt.BODY_SCHEMA,
        )


class KeyPacker:
    """Packs grouping keys once per snapshot, however many states they appear in."""

    def __init__(self) -> None:
        self._packed: dict[Key, bytes] = {}

    def __call__(self, key: Key) -> bytes:
        packed = self._packed.get(key)
        if packed is None:
            packed = self._packed[key] = pack_key(key)
        return packed


def _dumper(name: str, serializer: Serializer) -> Callable[[Any], bytes]:
    """``serializer.dumps`` whose errors name the state."""
    dumps = serializer.dumps

    def dump(value: Any) -> bytes:
        try:
            return dumps(value)
        except (TypeError, ValueError, OverflowError) as exc:
            msg = f"state '{name}': cannot serialize {type(value).__name__} value: {exc}"
            raise TypeError(msg) from exc

    return dump


def write_full(
    rows: RowBuffer,
    key_group: int,
    group: KeyGroupState,
    descriptors: dict[str, StateDescriptor],
    now_ms: int,
    packer: Callable[[Key], bytes],
) -> None:
    """Every live entry of ``group`` as rows (expired entries are swept, not written)."""
    for name, slot in group.slots.items():
        desc = descriptors[name]
        dump = _dumper(name, desc.value_serializer)
        ttl = desc.ttl_config is not None
        table = slot.table
        if desc.kind is StateKind.VALUE:
            if ttl:
                for key in [k for k, (_, exp) in table.items() if exp <= now_ms]:
                    del table[key]
                for key, (value, exp) in table.items():
                    rows.add(key_group, name, fmt.OP_PUT, packer(key), None, dump(value), exp)
            else:
                for key, value in table.items():
                    rows.add(key_group, name, fmt.OP_PUT, packer(key), None, dump(value))
        elif desc.kind is StateKind.LIST:
            for key in list(table):
                elements = table[key]
                if ttl:
                    elements = [e for e in elements if e[1] > now_ms]
                    if not elements:
                        del table[key]
                        continue
                    table[key] = elements
                    for value, exp in elements:
                        rows.add(key_group, name, fmt.OP_APPEND, packer(key), None, dump(value), exp)
                else:
                    packed = packer(key)
                    for value in elements:
                        rows.add(key_group, name, fmt.OP_APPEND, packed, None, dump(value))
        else:
            for key in list(table):
                entries = table[key]
                if ttl:
                    for user_key in [u for u, (_, exp) in entries.items() if exp <= now_ms]:
                        del entries[user_key]
                    if not entries:
                        del table[key]
                        continue
                packed = packer(key)
                for user_key, entry in entries.items():
                    value, exp = entry if ttl else (entry, None)
                    rows.add(key_group, name, fmt.OP_PUT, packed, pack(user_key), dump(value), exp)
        slot.reset_changes()
    for key, pending in group.timers.table.items():
        packed = packer(key)
        for timestamp in sorted(pending):
            rows.add(key_group, TIMERS, fmt.OP_PUT, packed, pack(timestamp))
    group.timers.reset_changes()


def write_delta(
    rows: RowBuffer,
    key_group: int,
    group: KeyGroupState,
    descriptors: dict[str, StateDescriptor],
    now_ms: int,
    packer: Callable[[Key], bytes],
) -> None:
    """What changed in ``group`` since its last snapshot, as rows."""
    for name, slot in group.slots.items():
        desc = descriptors[name]
        dump = _dumper(name, desc.value_serializer)
        ttl = desc.ttl_config is not None
        table = slot.table
        if desc.kind is StateKind.VALUE:
            for key in slot.changed:
                entry = table.get(key, _MISSING)
                if entry is _MISSING:
                    rows.add(key_group, name, fmt.OP_DELETE, packer(key))
                elif ttl:
                    rows.add(key_group, name, fmt.OP_PUT, packer(key), None, dump(entry[0]), entry[1])
                else:
                    rows.add(key_group, name, fmt.OP_PUT, packer(key), None, dump(entry))
        elif desc.kind is StateKind.LIST:
            for key in slot.changed:
                packed = packer(key)
                rows.add(key_group, name, fmt.OP_CLEAR, packed)
                _append_rows(rows, key_group, name, packed, table.get(key, ()), dump, ttl)
            for key, start in slot.appended_from.items():
                if key in slot.changed:
                    continue
                elements = table.get(key, [])
                _append_rows(rows, key_group, name, packer(key), elements[start:], dump, ttl)
        else:
            for key in slot.cleared:
                packed = packer(key)
                rows.add(key_group, name, fmt.OP_CLEAR, packed)
                for user_key, entry in table.get(key, {}).items():
                    value, exp = entry if ttl else (entry, None)
                    rows.add(key_group, name, fmt.OP_PUT, packed, pack(user_key), dump(value), exp)
            for key, user_key in slot.changed:
                if key in slot.cleared:
                    continue
                entries = table.get(key)
                entry = _MISSING if entries is None else entries.get(user_key, _MISSING)
                if entry is _MISSING:
                    rows.add(key_group, name, fmt.OP_DELETE, packer(key), pack(user_key))
                else:
                    value, exp = entry if ttl else (entry, None)
                    rows.add(key_group, name, fmt.OP_PUT, packer(key), pack(user_key), dump(value), exp)
        slot.reset_changes()
    timers = group.timers
    for key in timers.changed:
        packed = packer(key)
        rows.add(key_group, TIMERS, fmt.OP_CLEAR, packed)
        for timestamp in sorted(timers.table.get(key, ())):
            rows.add(key_group, TIMERS, fmt.OP_PUT, packed, pack(timestamp))
    timers.reset_changes()


def _append_rows(
    rows: RowBuffer,
    key_group: int,
    name: str,
    packed: bytes,
    elements: Iterable[Any],
    dump: Callable[[Any], bytes],
    ttl: bool,
) -> None:
    for element in elements:
        value, exp = element if ttl else (element, None)
        rows.add(key_group, name, fmt.OP_APPEND, packed, None, dump(value), exp)


# -- restore -----------------------------------------------------------------------------


class RowApplier:
    """Applies snapshot rows to key groups in memory (restore)."""

    def __init__(self, descriptors: dict[str, StateDescriptor], now_ms: int) -> None:
        self.descriptors = descriptors
        self.now_ms = now_ms
        self._keys: dict[bytes, Key] = {}

    def _key(self, packed: bytes) -> Key:
        key = self._keys.get(packed)
        if key is None:
            key = self._keys[packed] = tuple(unpack(packed))
        return key

    def apply(
        self,
        group: KeyGroupState,
        state: str,
        ops: list[int],
        keys: list[bytes],
        user_keys: list[bytes | None],
        values: list[bytes | None],
        expires: list[int | None],
    ) -> None:
        """Apply the rows of one state of one key group, in order."""
        if state == TIMERS:
            self._apply_timers(group, ops, keys, user_keys)
            return
        desc = self.descriptors[state]
        load = desc.value_serializer.loads
        ttl = desc.ttl_config
        default_expiry = self.now_ms + ttl.millis if ttl else None
        table = group.slots[state].table
        kind = desc.kind
        for op, packed, user_key, value, exp in zip(ops, keys, user_keys, values, expires, strict=True):
            key = self._key(packed)
            if op == fmt.OP_CLEAR:
                table.pop(key, None)
                continue
            if kind is StateKind.VALUE:
                if op == fmt.OP_DELETE:
                    table.pop(key, None)
                else:
                    decoded = load(value)  # type: ignore[arg-type]
                    table[key] = (decoded, exp or default_expiry) if ttl else decoded
            elif kind is StateKind.LIST:
                decoded = load(value)  # type: ignore[arg-type]
                element = (decoded, exp or default_expiry) if ttl else decoded
                table.setdefault(key, []).append(element)
            else:
                user = unpack(user_key)  # type: ignore[arg-type]
                if op == fmt.OP_DELETE:
                    entries = table.get(key)
                    if entries is not None:
                        entries.pop(user, None)
                        if not entries:
                            del table[key]
                else:
                    decoded = load(value)  # type: ignore[arg-type]
                    table.setdefault(key, {})[user] = (
                        (decoded, exp or default_expiry) if ttl else decoded
                    )

    def _apply_timers(
        self,
        group: KeyGroupState,
        ops: list[int],
        keys: list[bytes],
        user_keys: list[bytes | None],
    ) -> None:
        table = group.timers.table
        for op, packed, user_key in zip(ops, keys, user_keys, strict=True):
            key = self._key(packed)
            if op == fmt.OP_CLEAR:
                table.pop(key, None)
            else:
                group.add_timer(key, int(unpack(user_key)))  # type: ignore[arg-type]
