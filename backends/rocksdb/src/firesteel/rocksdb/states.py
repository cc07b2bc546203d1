"""Value, list and map state over a local RocksDB instance (layout: :mod:`firesteel.rocksdb.keys`).

Every operation is a point read, a point write or one prefix scan; nothing
reads or rewrites a whole list or map to change one element:

* value: ``get`` / ``put`` / ``delete`` of one key;
* list: ``append`` is one ``put`` under a new sequence number; ``get`` is one
  prefix scan; ``update`` and ``clear`` delete the elements found by a scan;
* map: ``get`` / ``put`` / ``remove`` of one entry; ``items`` is one prefix scan.

Writes go straight into the instance with the write-ahead log off, not into a
``WriteBatch``: rocksdict has no ``WriteBatchWithIndex``, so a batch could not
be read back before it is written, and an unlogged ``put`` measured as fast as
batched puts (1.4M/s against 1.2M/s for batches of 1,000). Nothing is lost by
skipping the log: a snapshot flushes the memtables into its checkpoint, and a
failed task's writes are rolled back by reopening the last checkpoint. Bulk
changes (``update``, ``clear``, expiry sweeps) do use a ``WriteBatch``.

State objects read the current key from a shared :class:`Cursor`, so a key
switch costs the same however many states exist.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from firesteel.backends.spi import Key, ListState, MapState, StateDescriptor, StateKind, ValueState
from firesteel.backends.toolkit import key_packer, unpack
from firesteel.rocksdb.keys import NO_EXPIRY, WITH_EXPIRY, decode_value, encode_value, stamp

_MISSING = object()


class Cursor:
    """What every state object of a store reads: the instance, the current key and the time."""

    __slots__ = ("db", "key", "key_group", "now_ms", "packed", "sequence")

    def __init__(self) -> None:
        self.db: Any = None
        """The open ``rocksdict.Rdict`` (replaced when the store rolls back)."""
        self.key: Key = ()
        self.key_group = b""
        """The current key group's 2-byte prefix."""
        self.packed = b""
        """The current key, msgpack-encoded."""
        self.now_ms = 0
        self.sequence = 0
        """The last list sequence number handed out (batch id << 32, then counting)."""

    def next_sequence(self) -> bytes:
        """A new list sequence number, greater than every earlier one."""
        self.sequence += 1
        return stamp(self.sequence)


def _scan(db: Any, prefix: bytes) -> list[tuple[bytes, bytes]]:
    """Every ``(key, value)`` whose key starts with ``prefix``, in key order."""
    found = []
    for stored_key, stored in db.items(from_key=prefix):
        if not stored_key.startswith(prefix):
            break
        found.append((stored_key, stored))
    return found


def _delete_all(db: Any, keys: Iterable[bytes]) -> None:
    import rocksdict as rd

    batch = rd.WriteBatch(raw_mode=True)
    for stored_key in keys:
        batch.delete(stored_key)
    if len(batch):
        db.write(batch)


class _Bound:
    """What every state object holds: its descriptor, read once into attributes, its id and
    the store's cursor. Operations stay inlined in the subclasses: they are the hot path."""

    __slots__ = (
        "_check",
        "_cursor",
        "_delete",
        "_desc",
        "_dumps",
        "_expires_in",
        "_get",
        "_id",
        "_loads",
        "_name",
        "_pack",
        "_plain",
        "_put",
        "_refresh",
        "_type",
    )

    def __init__(self, descriptor: StateDescriptor, cursor: Cursor, state_id: bytes) -> None:
        self._desc = descriptor
        self._name = descriptor.name
        self._cursor = cursor
        self._id = state_id
        self._check = descriptor.type is not None
        self._type: Any = descriptor.type or object
        self._dumps = descriptor.value_serializer.dumps
        self._loads = descriptor.value_serializer.loads
        ttl = descriptor.ttl_config
        self._expires_in: int | None = ttl.millis if ttl else None
        self._refresh = bool(ttl and ttl.refresh_on_read)
        self._plain = ttl is None and not self._check
        """No expiry and no type check: the hot paths encode inline."""
        # The instance only changes between tasks, and state objects are made per task.
        self._get = cursor.db.get
        self._put = cursor.db.put
        self._delete = cursor.db.delete
        self._pack = key_packer()
        """Encodes map user keys: this thread's packer, bound once (a lookup per call costs
        as much as the encoding)."""

    def _encode(self, value: Any) -> bytes:
        """Type-check and serialize one value with its expiry header."""
        if self._check and not isinstance(value, self._type):
            self._desc.check_type(value)
        try:
            data = self._dumps(value)
        except (TypeError, ValueError, OverflowError) as exc:
            msg = f"state '{self._name}': cannot serialize a value: {exc}"
            raise TypeError(msg) from exc
        if self._expires_in is None:
            return NO_EXPIRY + data
        return encode_value(data, self._cursor.now_ms + self._expires_in)

    def _live(self, stored: bytes) -> bytes | None:
        """The serialized value of a stored entry, or None when its TTL has passed.

        An expiry written while the state had a TTL is ignored once it has none.
        """
        if stored[0] != WITH_EXPIRY:
            return stored[1:]
        data, expires = decode_value(stored)
        if self._expires_in is not None and expires is not None and expires <= self._cursor.now_ms:
            return None
        return data

    def _read_expiring(
        self, stored_key: bytes, stored: bytes, default: Any, *, refresh: bool
    ) -> Any:
        """The value of an entry stored with an expiry, or ``default`` when it has passed (the
        entry is then deleted); ``refresh`` restarts a live entry's TTL (refresh on read).

        The reads' slow path: entries without an expiry are decoded inline by the caller.
        """
        data = self._live(stored)
        if data is None:
            self._delete(stored_key)
            return default
        if refresh and self._expires_in is not None:
            self._put(stored_key, encode_value(data, self._cursor.now_ms + self._expires_in))
        return self._loads(data)

    def _prefix(self) -> bytes:
        cursor = self._cursor
        return cursor.key_group + self._id + cursor.packed


class RocksValueState(_Bound, ValueState):
    """One value per key: one RocksDB entry."""

    __slots__ = ()

    def value(self) -> Any:
        cursor = self._cursor
        stored_key = cursor.key_group + self._id + cursor.packed
        stored = self._get(stored_key)
        if stored is None:
            return None
        if stored[0] != WITH_EXPIRY:
            return self._loads(stored[1:])
        return self._read_expiring(stored_key, stored, None, refresh=self._refresh)

    def update(self, value: Any) -> None:
        cursor = self._cursor
        if self._plain and value is not None:
            try:
                stored = NO_EXPIRY + self._dumps(value)
            except (TypeError, ValueError, OverflowError):
                stored = self._encode(value)  # raises, naming the state
            self._put(cursor.key_group + self._id + cursor.packed, stored)
        elif value is None:
            self.clear()
        else:
            self._put(cursor.key_group + self._id + cursor.packed, self._encode(value))

    def clear(self) -> None:
        cursor = self._cursor
        self._delete(cursor.key_group + self._id + cursor.packed)


class RocksListState(_Bound, ListState):
    """A list per key: one RocksDB entry per element, keyed by a sequence number."""

    __slots__ = ()

    def _live_elements(self) -> list[bytes]:
        """The serialized live elements, in order; expired ones are deleted."""
        db = self._cursor.db
        live: list[bytes] = []
        expired: list[bytes] = []
        for stored_key, stored in _scan(db, self._prefix()):
            data = self._live(stored)
            if data is None:
                expired.append(stored_key)
            else:
                live.append(data)
        if expired:
            _delete_all(db, expired)
        return live

    def get(self) -> list[Any]:
        loads = self._loads
        return [loads(data) for data in self._live_elements()]

    def __len__(self) -> int:
        return len(self._live_elements())

    def append(self, value: Any) -> None:
        cursor = self._cursor
        self._put(
            cursor.key_group + self._id + cursor.packed + cursor.next_sequence(),
            self._encode(value),
        )

    def extend(self, values: Iterable[Any]) -> None:
        import rocksdict as rd

        cursor = self._cursor
        prefix = self._prefix()
        batch = rd.WriteBatch(raw_mode=True)
        for value in values:
            batch.put(prefix + cursor.next_sequence(), self._encode(value))
        if len(batch):
            cursor.db.write(batch)

    def update(self, values: Iterable[Any]) -> None:
        import rocksdict as rd

        cursor = self._cursor
        prefix = self._prefix()
        encoded = [self._encode(value) for value in values]
        batch = rd.WriteBatch(raw_mode=True)
        for stored_key, _ in _scan(cursor.db, prefix):
            batch.delete(stored_key)
        for data in encoded:
            batch.put(prefix + cursor.next_sequence(), data)
        if len(batch):
            cursor.db.write(batch)

    def clear(self) -> None:
        db = self._cursor.db
        _delete_all(db, [stored_key for stored_key, _ in _scan(db, self._prefix())])


class RocksMapState(_Bound, MapState):
    """A map per key: one RocksDB entry per map entry, keyed by the msgpack of the user key."""

    __slots__ = ()

    def get(self, user_key: Any, default: Any = None) -> Any:
        cursor = self._cursor
        stored_key = cursor.key_group + self._id + cursor.packed + self._pack(user_key)
        stored = self._get(stored_key)
        if stored is None:
            return default
        if stored[0] != WITH_EXPIRY:
            return self._loads(stored[1:])
        return self._read_expiring(stored_key, stored, default, refresh=False)

    def put(self, user_key: Any, value: Any) -> None:
        if value is None:
            self.remove(user_key)
            return
        cursor = self._cursor
        self._put(
            cursor.key_group + self._id + cursor.packed + self._pack(user_key), self._encode(value)
        )

    def remove(self, user_key: Any) -> None:
        cursor = self._cursor
        self._delete(cursor.key_group + self._id + cursor.packed + self._pack(user_key))

    def contains(self, user_key: Any) -> bool:
        return self.get(user_key, _MISSING) is not _MISSING

    def items(self) -> list[tuple[Any, Any]]:
        db = self._cursor.db
        prefix = self._prefix()
        start = len(prefix)
        loads = self._loads
        live: list[tuple[Any, Any]] = []
        expired: list[bytes] = []
        for stored_key, stored in _scan(db, prefix):
            data = self._live(stored)
            if data is None:
                expired.append(stored_key)
            else:
                live.append((unpack(stored_key[start:]), loads(data)))
        if expired:
            _delete_all(db, expired)
        return live

    def clear(self) -> None:
        db = self._cursor.db
        _delete_all(db, [stored_key for stored_key, _ in _scan(db, self._prefix())])


BoundState = RocksValueState | RocksListState | RocksMapState


def make_state(descriptor: StateDescriptor, cursor: Cursor, state_id: bytes) -> BoundState:
    """The state object class for ``descriptor``'s kind."""
    if descriptor.kind is StateKind.VALUE:
        return RocksValueState(descriptor, cursor, state_id)
    if descriptor.kind is StateKind.LIST:
        return RocksListState(descriptor, cursor, state_id)
    return RocksMapState(descriptor, cursor, state_id)
