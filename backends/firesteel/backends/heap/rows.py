"""Heap state <-> snapshot rows: full and delta bodies, and applying them on restore.

A full snapshot writes every entry of a key group; a delta writes only what
changed since the previous snapshot, from the change tracking of
:mod:`firesteel.backends.heap.states` (``PUT`` / ``DELETE`` / ``APPEND`` /
``CLEAR`` rows, see :data:`firesteel.backends.format.BODY_SCHEMA`).
:class:`RowApplier` replays bodies into :class:`KeyGroupState` tables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from firesteel.backends import format as fmt
from firesteel.backends.heap.states import TIMERS, KeyGroupState
from firesteel.state.backend import Key
from firesteel.state.descriptors import StateDescriptor, StateKind
from firesteel.state.serializers import Serializer, key_packer, pack, pack_key, unpack

_ABSENT = object()


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


class _StateRows:
    """Rows of one state of one key group, added to ``rows``."""

    def __init__(self, rows: RowBuffer, key_group: int, name: str, desc: StateDescriptor) -> None:
        self.rows = rows
        self.key_group = key_group
        self.name = name
        self.desc = desc
        self.ttl = desc.ttl_config is not None

    def values(self, packed_keys: list[bytes], entries: list[Any]) -> None:
        """``PUT`` rows of a value state: one per packed key, ``entries`` the stored values in
        the same order (``(value, expires_ms)`` pairs with a TTL)."""
        ttl = self.ttl
        self.rows.extend(
            self.key_group,
            self.name,
            fmt.OP_PUT,
            packed_keys,
            values=self._dump([e[0] for e in entries] if ttl else entries),
            expires=[e[1] for e in entries] if ttl else None,
        )

    def entries(self, packed: bytes, content: Any, op: int) -> None:
        """Rows of one key's whole list or map (``content``), all with operation ``op``."""
        if self.desc.kind is not StateKind.LIST:
            self.map_entries([packed] * len(content), list(content), list(content.values()), op)
            return
        ttl = self.ttl
        self.rows.extend(
            self.key_group,
            self.name,
            op,
            [packed] * len(content),
            values=self._dump([e[0] for e in content] if ttl else content),
            expires=[e[1] for e in content] if ttl else None,
        )

    def map_entries(
        self, packed_keys: list[bytes], user_keys: list[Any], entries: list[Any], op: int
    ) -> None:
        """Rows of single map entries of many keys (``entries[i]`` of ``user_keys[i]`` of
        ``packed_keys[i]``), all with operation ``op``."""
        ttl = self.ttl
        values = [e[0] for e in entries] if ttl else entries
        self.rows.extend(
            self.key_group,
            self.name,
            op,
            packed_keys,
            user_keys=_packed_user_keys(user_keys),
            values=self._dump(values),
            expires=[e[1] for e in entries] if ttl else None,
        )

    def replace(self, packed: bytes, content: Any, op: int) -> None:
        """A ``CLEAR`` row for one key, then rows of its whole list or map (see :meth:`entries`)."""
        self.rows.extend(self.key_group, self.name, fmt.OP_CLEAR, [packed])
        self.entries(packed, content, op)

    def delete(self, packed_keys: list[bytes], user_keys: list[bytes | None] | None = None) -> None:
        """``DELETE`` rows: of whole values, or of map entries (``user_keys``)."""
        self.rows.extend(self.key_group, self.name, fmt.OP_DELETE, packed_keys, user_keys=user_keys)

    def _dump(self, values: Iterable[Any]) -> list[bytes | None]:
        return _dump_all(self.name, self.desc.value_serializer, values)


class BodyWriter:
    """The rows of one snapshot body: key groups whole (:meth:`full`) or their changes since
    the last snapshot (:meth:`delta`)."""

    def __init__(self, descriptors: dict[str, StateDescriptor], now_ms: int) -> None:
        self.rows = RowBuffer()
        self.descriptors = descriptors
        self.now_ms = now_ms
        self._packer = KeyPacker()

    def full(self, key_group: int, group: KeyGroupState) -> None:
        """Every live entry of ``group`` as rows (expired entries are swept, not written)."""
        for name, slot in group.slots.items():
            desc = self.descriptors[name]
            out = _StateRows(self.rows, key_group, name, desc)
            table = slot.table
            if desc.ttl_config is not None:
                _sweep(desc, table, self.now_ms)
            if desc.kind is StateKind.VALUE:
                out.values(self._packer.many(table), list(table.values()))
            else:
                op = fmt.OP_APPEND if desc.kind is StateKind.LIST else fmt.OP_PUT
                for key, content in table.items():
                    out.entries(self._packer(key), content, op)
            slot.reset_changes()
        for key, pending in group.timers.table.items():
            _timer_rows(self.rows, key_group, self._packer(key), pending)
        group.timers.reset_changes()

    def delta(self, key_group: int, group: KeyGroupState) -> None:
        """What changed in ``group`` since its last snapshot, as rows."""
        for name, slot in group.slots.items():
            desc = self.descriptors[name]
            out = _StateRows(self.rows, key_group, name, desc)
            table = slot.table
            if desc.kind is StateKind.VALUE:
                present = [key for key in slot.changed if key in table]
                gone = [key for key in slot.changed if key not in table]
                out.values(self._packer.many(present), [table[key] for key in present])
                out.delete(self._packer.many(gone))
            elif desc.kind is StateKind.LIST:
                for key in slot.changed:
                    out.replace(self._packer(key), table.get(key, []), fmt.OP_APPEND)
                for key, start in slot.appended_from.items():
                    if key not in slot.changed:
                        out.entries(self._packer(key), table.get(key, [])[start:], fmt.OP_APPEND)
            else:
                for key in slot.cleared:
                    out.replace(self._packer(key), table.get(key, {}), fmt.OP_PUT)
                self._map_changes(out, slot)
            slot.reset_changes()
        timers = group.timers
        for key in timers.changed:
            packed = self._packer(key)
            self.rows.extend(key_group, TIMERS, fmt.OP_CLEAR, [packed])
            _timer_rows(self.rows, key_group, packed, timers.table.get(key, ()))
        timers.reset_changes()

    def _map_changes(self, out: _StateRows, slot: Any) -> None:
        """A map state's changed entries (outside cleared keys): one ``PUT`` or ``DELETE`` row
        each, written as two runs of rows (each entry changed once, so order is free)."""
        table = slot.table
        cleared = slot.cleared
        put_keys: list[Any] = []
        put_user_keys: list[Any] = []
        put_entries: list[Any] = []
        gone_keys: list[Any] = []
        gone_user_keys: list[Any] = []
        for key, user_key in slot.changed:
            if key in cleared:
                continue
            entries_of_key = table.get(key)
            entry = _ABSENT if entries_of_key is None else entries_of_key.get(user_key, _ABSENT)
            if entry is _ABSENT:
                gone_keys.append(key)
                gone_user_keys.append(user_key)
            else:
                put_keys.append(key)
                put_user_keys.append(user_key)
                put_entries.append(entry)
        if put_keys:
            packed = [self._packer(key) for key in put_keys]
            out.map_entries(packed, put_user_keys, put_entries, fmt.OP_PUT)
        if gone_keys:
            out.delete([self._packer(key) for key in gone_keys], _packed_user_keys(gone_user_keys))


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
        load: Callable[[bytes], Any] | None = None,
    ) -> None:
        """Apply the rows of one state of one key group, in order (``None`` only where the
        operation has no user key or value); ``load`` decodes values stored under an older
        schema (default: the state's serializer)."""
        if state == TIMERS:
            self._apply_timers(group, ops, keys, user_keys)
            return
        desc = self.descriptors[state]
        load = load or desc.value_serializer.loads
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
