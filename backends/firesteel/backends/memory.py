"""Keyed state in Python dicts: the state objects and the per-key-group tables behind them.

Both the heap and the filesystem backend keep state here; they differ only in
where :class:`DictKeyedStore` writes its snapshots.

Layout: one :class:`KeyGroupState` per key group, holding one :class:`Slot`
(a dict keyed by grouping key, plus what changed since the last snapshot) per
declared state, and the key group's timers. State objects read the current
key and its group's slots from a shared :class:`Cursor`, so a key switch is
two attribute writes and an operation is a few lookups, a dict access and a
set insert.

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
from collections.abc import Iterable
from typing import Any

from firesteel.backends import format as fmt
from firesteel.state.api import ListState, MapState, ValueState
from firesteel.state.backend import Key
from firesteel.state.descriptors import StateDescriptor, StateKind
from firesteel.state.serializers import Serializer, key_packer, pack, pack_key, unpack

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


class Cursor:
    """Where every state object of a store points: the current key, its key group's slots,
    and the batch's processing time.

    A key switch sets two attributes here; state objects read them on each
    operation, so switching keys costs the same however many states exist.
    """

    __slots__ = ("key", "now_ms", "slots")

    def __init__(self) -> None:
        self.key: Key = ()
        self.slots: dict[str, Slot] = {}
        self.now_ms = 0


# -- value -------------------------------------------------------------------------------


class _Bound:
    """What every state object holds: its descriptor, read once into attributes so an
    operation does no descriptor lookups, and the store's shared cursor.

    ``_ttl`` is the TTL in milliseconds, or None without one. Operations stay
    inlined in the subclasses (the type check included) because they are the
    per-record hot path.
    """

    __slots__ = ("_check", "_cursor", "_desc", "_name", "_ttl", "_type")

    def __init__(self, descriptor: StateDescriptor, cursor: Cursor) -> None:
        self._desc = descriptor
        self._name = descriptor.name
        self._cursor = cursor
        self._check = descriptor.type is not None
        self._type: Any = descriptor.type or object
        ttl = descriptor.ttl_config
        self._ttl: int | None = ttl.millis if ttl else None


class HeapValueState(_Bound, ValueState):
    """A value per key, without TTL."""

    __slots__ = ()

    def value(self) -> Any:
        cursor = self._cursor
        return cursor.slots[self._name].table.get(cursor.key)

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
            return
        if self._check and not isinstance(value, self._type):
            self._desc.check_type(value)
        cursor = self._cursor
        slot = cursor.slots[self._name]
        slot.table[cursor.key] = value
        slot.changed.add(cursor.key)

    def clear(self) -> None:
        cursor = self._cursor
        slot = cursor.slots[self._name]
        if slot.table.pop(cursor.key, _MISSING) is not _MISSING:
            slot.changed.add(cursor.key)


class HeapValueStateTtl(HeapValueState):
    """A value per key whose entries expire (stored as ``(value, expires_ms)``)."""

    __slots__ = ("_expires_in", "_refresh")

    def __init__(self, descriptor: StateDescriptor, cursor: Cursor) -> None:
        super().__init__(descriptor, cursor)
        ttl = descriptor.ttl_config
        assert ttl is not None
        self._expires_in = ttl.millis
        self._refresh = ttl.refresh_on_read

    def value(self) -> Any:
        cursor = self._cursor
        slot = cursor.slots[self._name]
        key = cursor.key
        entry = slot.table.get(key)
        if entry is None:
            return None
        now = cursor.now_ms
        if entry[1] <= now:
            del slot.table[key]
            slot.changed.add(key)
            return None
        if self._refresh:
            slot.table[key] = (entry[0], now + self._expires_in)
            slot.changed.add(key)
        return entry[0]

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
            return
        if self._check and not isinstance(value, self._type):
            self._desc.check_type(value)
        cursor = self._cursor
        slot = cursor.slots[self._name]
        slot.table[cursor.key] = (value, cursor.now_ms + self._expires_in)
        slot.changed.add(cursor.key)


# -- list --------------------------------------------------------------------------------


class HeapListState(_Bound, ListState):
    """A list per key; with a TTL each element is ``(value, expires_ms)``."""

    __slots__ = ()

    def _live(self) -> list[Any]:
        """The stored list with expired elements removed (a rewrite, when any expired)."""
        cursor = self._cursor
        stored = cursor.slots[self._name].table.get(cursor.key)
        if stored is None:
            return []
        if self._ttl is None:
            return stored
        now = cursor.now_ms
        if all(expires > now for _, expires in stored):
            return stored
        kept = [entry for entry in stored if entry[1] > now]
        self._rewrite(kept)
        return kept

    def _rewrite(self, entries: list[Any]) -> None:
        cursor = self._cursor
        slot = cursor.slots[self._name]
        if entries:
            slot.table[cursor.key] = entries
        else:
            slot.table.pop(cursor.key, None)
        slot.changed.add(cursor.key)
        slot.appended_from.pop(cursor.key, None)

    def get(self) -> list[Any]:
        live = self._live()
        if self._ttl is None:
            return list(live)
        return [value for value, _ in live]

    def __len__(self) -> int:
        return len(self._live())

    def append(self, value: Any) -> None:
        if self._check and not isinstance(value, self._type):
            self._desc.check_type(value)
        cursor = self._cursor
        slot = cursor.slots[self._name]
        key = cursor.key
        stored = slot.table.get(key)
        if stored is None:
            stored = slot.table[key] = []
        if key not in slot.appended_from and key not in slot.changed:
            slot.appended_from[key] = len(stored)
        stored.append(value if self._ttl is None else (value, cursor.now_ms + self._ttl))

    def extend(self, values: Iterable[Any]) -> None:
        for value in values:
            self.append(value)

    def update(self, values: Iterable[Any]) -> None:
        items = list(values)
        if self._check:
            for value in items:
                self._desc.check_type(value)
        if self._ttl is not None:
            expires = self._cursor.now_ms + self._ttl
            items = [(value, expires) for value in items]
        self._rewrite(items)

    def clear(self) -> None:
        cursor = self._cursor
        if cursor.key in cursor.slots[self._name].table:
            self._rewrite([])


# -- map ---------------------------------------------------------------------------------


class HeapMapState(_Bound, MapState):
    """A map per key; with a TTL each entry is ``(value, expires_ms)``."""

    __slots__ = ()

    def _remove_entry(self, slot: Slot, entries: dict[Any, Any], user_key: Any) -> None:
        key = self._cursor.key
        del entries[user_key]
        slot.changed.add((key, user_key))
        if not entries:
            del slot.table[key]

    def get(self, user_key: Any, default: Any = None) -> Any:
        cursor = self._cursor
        slot = cursor.slots[self._name]
        entries = slot.table.get(cursor.key)
        if entries is None:
            return default
        entry = entries.get(user_key, _MISSING)
        if entry is _MISSING:
            return default
        if self._ttl is None:
            return entry
        if entry[1] <= cursor.now_ms:
            self._remove_entry(slot, entries, user_key)
            return default
        return entry[0]

    def put(self, user_key: Any, value: Any) -> None:
        if value is None:
            self.remove(user_key)
            return
        if self._check and not isinstance(value, self._type):
            self._desc.check_type(value)
        cursor = self._cursor
        slot = cursor.slots[self._name]
        key = cursor.key
        entries = slot.table.get(key)
        if entries is None:
            entries = slot.table[key] = {}
        entries[user_key] = value if self._ttl is None else (value, cursor.now_ms + self._ttl)
        slot.changed.add((key, user_key))

    def remove(self, user_key: Any) -> None:
        cursor = self._cursor
        slot = cursor.slots[self._name]
        entries = slot.table.get(cursor.key)
        if entries is not None and user_key in entries:
            self._remove_entry(slot, entries, user_key)

    def contains(self, user_key: Any) -> bool:
        return self.get(user_key, _MISSING) is not _MISSING

    def items(self) -> list[tuple[Any, Any]]:
        cursor = self._cursor
        slot = cursor.slots[self._name]
        entries = slot.table.get(cursor.key)
        if not entries:
            return []
        if self._ttl is None:
            return list(entries.items())
        now = cursor.now_ms
        expired = [user_key for user_key, (_, expires) in entries.items() if expires <= now]
        for user_key in expired:
            self._remove_entry(slot, entries, user_key)
        return [(user_key, value) for user_key, (value, _) in entries.items()]

    def clear(self) -> None:
        cursor = self._cursor
        slot = cursor.slots[self._name]
        if slot.table.pop(cursor.key, None) is not None:
            slot.cleared.add(cursor.key)

    def __len__(self) -> int:
        return len(self.items())


BoundState = HeapValueState | HeapListState | HeapMapState


def make_state(descriptor: StateDescriptor, cursor: Cursor) -> BoundState:
    """The state object class for ``descriptor``'s kind and TTL."""
    if descriptor.kind is StateKind.VALUE:
        if descriptor.ttl_config is None:
            return HeapValueState(descriptor, cursor)
        return HeapValueStateTtl(descriptor, cursor)
    if descriptor.kind is StateKind.LIST:
        return HeapListState(descriptor, cursor)
    return HeapMapState(descriptor, cursor)


# -- snapshot rows -----------------------------------------------------------------------


class RowBuffer:
    """Columns of a snapshot body being built (see :data:`firesteel.backends.format.BODY_SCHEMA`).

    Rows are added in runs of one key group and state, column by column, so a
    million entries cost a few list extends rather than a million calls.
    """

    def __init__(self) -> None:
        self.key_group: list[int] = []
        self.state: list[str] = []
        self.op: list[int] = []
        self.key: list[bytes] = []
        self.user_key: list[bytes | None] = []
        self.value: list[bytes | None] = []
        self.expires: list[int | None] = []

    def extend(
        self,
        key_group: int,
        state: str,
        op: int | list[int],
        keys: list[bytes],
        *,
        user_keys: list[bytes | None] | None = None,
        values: list[bytes | None] | None = None,
        expires: list[int | None] | None = None,
    ) -> None:
        """Append ``len(keys)`` rows of one key group and state."""
        count = len(keys)
        if not count:
            return
        self.key_group.extend([key_group] * count)
        self.state.extend([state] * count)
        self.op.extend(op if isinstance(op, list) else [op] * count)
        self.key.extend(keys)
        none: list[Any] = [None] * count
        self.user_key.extend(user_keys if user_keys is not None else none)
        self.value.extend(values if values is not None else none)
        self.expires.extend(expires if expires is not None else none)

    def __len__(self) -> int:
        return len(self.op)

    def to_table(self) -> Any:
        """The rows as an Arrow table of the body schema."""
        import pyarrow as pa

        states = pa.array(self.state, pa.string()).dictionary_encode()
        return pa.table(
            [
                pa.array(self.key_group, pa.int16()),
                states.cast(pa.dictionary(pa.int16(), pa.string())),
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

    def many(self, keys: Iterable[Key]) -> list[bytes]:
        """Pack several keys (value states: each key once, so no cache)."""
        pack_one = key_packer()
        return [pack_one(k) for k in keys]


def _dump_all(name: str, serializer: Serializer, values: Iterable[Any]) -> list[bytes | None]:
    """Serialize values; an error names the state."""
    dumps = serializer.dumps
    try:
        return [dumps(value) for value in values]
    except (TypeError, ValueError, OverflowError) as exc:
        msg = f"state '{name}': cannot serialize a value: {exc}"
        raise TypeError(msg) from exc


def _packed_user_keys(user_keys: Iterable[Any]) -> list[bytes | None]:
    return [pack(user_key) for user_key in user_keys]


def _sweep(desc: StateDescriptor, table: dict[Any, Any], now_ms: int) -> None:
    """Drop expired entries of a TTL state (before a full snapshot)."""
    if desc.kind is StateKind.VALUE:
        for key in [k for k, (_, exp) in table.items() if exp <= now_ms]:
            del table[key]
        return
    for key in list(table):
        content = table[key]
        if desc.kind is StateKind.LIST:
            kept = [e for e in content if e[1] > now_ms]
            if len(kept) != len(content):
                table[key] = kept
        else:
            for user_key in [u for u, (_, exp) in content.items() if exp <= now_ms]:
                del content[user_key]
            kept = content
        if not kept:
            del table[key]


def _value_rows(
    rows: RowBuffer,
    key_group: int,
    name: str,
    desc: StateDescriptor,
    *,
    packed_keys: list[bytes],
    entries: list[Any],
) -> None:
    """``PUT`` rows of a value state: one per packed key, ``entries`` the stored values in
    the same order (``(value, expires_ms)`` pairs with a TTL)."""
    ttl = desc.ttl_config is not None
    rows.extend(
        key_group,
        name,
        fmt.OP_PUT,
        packed_keys,
        values=_dump_all(name, desc.value_serializer, [e[0] for e in entries] if ttl else entries),
        expires=[e[1] for e in entries] if ttl else None,
    )


def _timer_rows(rows: RowBuffer, key_group: int, packed: bytes, pending: Iterable[int]) -> None:
    """``PUT`` rows of one key's pending timers, ascending."""
    stamps = sorted(pending)
    rows.extend(
        key_group,
        TIMERS,
        fmt.OP_PUT,
        [packed] * len(stamps),
        user_keys=_packed_user_keys(stamps),
    )


def _entry_rows(
    rows: RowBuffer,
    key_group: int,
    name: str,
    desc: StateDescriptor,
    *,
    packed: bytes,
    content: Any,
    op: int,
) -> None:
    """Rows of one key's whole list or map (``content``), all with operation ``op``."""
    ttl = desc.ttl_config is not None
    if desc.kind is StateKind.LIST:
        values = [e[0] for e in content] if ttl else content
        expires = [e[1] for e in content] if ttl else None
        user_keys = None
    else:
        user_keys = _packed_user_keys(content)
        values = [e[0] for e in content.values()] if ttl else list(content.values())
        expires = [e[1] for e in content.values()] if ttl else None
    rows.extend(
        key_group,
        name,
        op,
        [packed] * len(values),
        user_keys=user_keys,
        values=_dump_all(name, desc.value_serializer, values),
        expires=expires,
    )


def _replace_rows(
    rows: RowBuffer,
    key_group: int,
    name: str,
    desc: StateDescriptor,
    *,
    packed: bytes,
    content: Any,
    op: int,
) -> None:
    """A ``CLEAR`` row for one key, then rows of its whole list or map (see :func:`_entry_rows`)."""
    rows.extend(key_group, name, fmt.OP_CLEAR, [packed])
    _entry_rows(rows, key_group, name, desc, packed=packed, content=content, op=op)


def write_full(
    rows: RowBuffer,
    key_group: int,
    group: KeyGroupState,
    descriptors: dict[str, StateDescriptor],
    *,
    now_ms: int,
    packer: KeyPacker,
) -> None:
    """Every live entry of ``group`` as rows (expired entries are swept, not written)."""
    for name, slot in group.slots.items():
        desc = descriptors[name]
        table = slot.table
        if desc.ttl_config is not None:
            _sweep(desc, table, now_ms)
        if desc.kind is StateKind.VALUE:
            _value_rows(
                rows,
                key_group,
                name,
                desc,
                packed_keys=packer.many(table),
                entries=list(table.values()),
            )
        else:
            op = fmt.OP_APPEND if desc.kind is StateKind.LIST else fmt.OP_PUT
            for key, content in table.items():
                _entry_rows(rows, key_group, name, desc, packed=packer(key), content=content, op=op)
        slot.reset_changes()
    for key, pending in group.timers.table.items():
        _timer_rows(rows, key_group, packer(key), pending)
    group.timers.reset_changes()


def write_delta(
    rows: RowBuffer,
    key_group: int,
    group: KeyGroupState,
    descriptors: dict[str, StateDescriptor],
    *,
    now_ms: int,
    packer: KeyPacker,
) -> None:
    """What changed in ``group`` since its last snapshot, as rows."""
    for name, slot in group.slots.items():
        desc = descriptors[name]
        table = slot.table
        if desc.kind is StateKind.VALUE:
            present = [key for key in slot.changed if key in table]
            gone = [key for key in slot.changed if key not in table]
            _value_rows(
                rows,
                key_group,
                name,
                desc,
                packed_keys=packer.many(present),
                entries=[table[key] for key in present],
            )
            rows.extend(key_group, name, fmt.OP_DELETE, packer.many(gone))
        elif desc.kind is StateKind.LIST:
            for key in slot.changed:
                _replace_rows(
                    rows,
                    key_group,
                    name,
                    desc,
                    packed=packer(key),
                    content=table.get(key, []),
                    op=fmt.OP_APPEND,
                )
            for key, start in slot.appended_from.items():
                if key not in slot.changed:
                    new = table.get(key, [])[start:]
                    _entry_rows(
                        rows,
                        key_group,
                        name,
                        desc,
                        packed=packer(key),
                        content=new,
                        op=fmt.OP_APPEND,
                    )
        else:
            for key in slot.cleared:
                _replace_rows(
                    rows,
                    key_group,
                    name,
                    desc,
                    packed=packer(key),
                    content=table.get(key, {}),
                    op=fmt.OP_PUT,
                )
            for key, user_key in slot.changed:
                if key in slot.cleared:
                    continue
                entries_of_key = table.get(key)
                entry = (
                    _MISSING if entries_of_key is None else entries_of_key.get(user_key, _MISSING)
                )
                if entry is _MISSING:
                    rows.extend(
                        key_group, name, fmt.OP_DELETE, [packer(key)], user_keys=[pack(user_key)]
                    )
                else:
                    _entry_rows(
                        rows,
                        key_group,
                        name,
                        desc,
                        packed=packer(key),
                        content={user_key: entry},
                        op=fmt.OP_PUT,
                    )
        slot.reset_changes()
    timers = group.timers
    for key in timers.changed:
        packed = packer(key)
        rows.extend(key_group, TIMERS, fmt.OP_CLEAR, [packed])
        _timer_rows(rows, key_group, packed, timers.table.get(key, ()))
    timers.reset_changes()


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
        *,
        user_keys: list[Any],
        values: list[Any],
        expires: list[int | None],
    ) -> None:
        """Apply the rows of one state of one key group, in order (``None`` only where the
        operation has no user key or value)."""
        if state == TIMERS:
            self._apply_timers(group, ops, keys, user_keys)
            return
        desc = self.descriptors[state]
        load = desc.value_serializer.loads
        ttl = desc.ttl_config
        default_expiry = self.now_ms + ttl.millis if ttl else None
        table = group.slots[state].table
        kind = desc.kind
        for op, packed, user_key, value, exp in zip(
            ops, keys, user_keys, values, expires, strict=True
        ):
            key = self._key(packed)
            if op == fmt.OP_CLEAR:
                table.pop(key, None)
                continue
            if kind is StateKind.VALUE:
                if op == fmt.OP_DELETE:
                    table.pop(key, None)
                else:
                    decoded = load(value)
                    table[key] = (decoded, exp or default_expiry) if ttl else decoded
            elif kind is StateKind.LIST:
                decoded = load(value)
                element = (decoded, exp or default_expiry) if ttl else decoded
                table.setdefault(key, []).append(element)
            else:
                user = unpack(user_key)
                if op == fmt.OP_DELETE:
                    entries = table.get(key)
                    if entries is not None:
                        entries.pop(user, None)
                        if not entries:
                            del table[key]
                else:
                    decoded = load(value)
                    table.setdefault(key, {})[user] = (
                        (decoded, exp or default_expiry) if ttl else decoded
                    )

    def _apply_timers(
        self,
        group: KeyGroupState,
        ops: list[int],
        keys: list[bytes],
        user_keys: list[Any],
    ) -> None:
        table = group.timers.table
        for op, packed, user_key in zip(ops, keys, user_keys, strict=True):
            key = self._key(packed)
            if op == fmt.OP_CLEAR:
                table.pop(key, None)
            else:
                group.add_timer(key, int(unpack(user_key)))
