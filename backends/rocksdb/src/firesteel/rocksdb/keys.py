"""How keyed state is laid out in one RocksDB instance: every key starts with its key group.

::

    value state   kg(2) | state id(4) | key
    list state    kg(2) | state id(4) | key | sequence(8)
    map state     kg(2) | state id(4) | key | user key
    timers        kg(2) | TIMERS_BY_TIME(4) | timestamp(8) | key
                  kg(2) | TIMERS_BY_KEY(4)  | key | timestamp(8)

* ``kg`` is the key group, big-endian, so the keys of a key-group range are one
  contiguous byte range: a range is restored, split or dropped with one scan
  or ``delete_range`` (Flink's layout, with a state id instead of a column family).
* The state id is the first 4 bytes of the BLAKE2b of the state's name: stable
  across restarts and workers without a registry; two names with the same id
  are refused when declared.
* ``key`` is the msgpack array of the grouping key (:func:`~firesteel.state.serializers.pack_key`),
  and a user key the msgpack of the map key. msgpack values are self-delimiting,
  so no encoded key is a prefix of another: the entries of one key are exactly
  the keys starting with ``kg | id | key`` (a map or list is one prefix scan).
* Timestamps and list sequence numbers are big-endian with the sign bit
  flipped, so byte order is numeric order.

Values start with one header byte: ``0`` = no expiry, then the serialized
value; ``1`` = an 8-byte expiry (epoch ms, same encoding) then the value. The
header makes a value readable whatever the state's current TTL setting.
"""

from __future__ import annotations

import hashlib

from firesteel.core.spi import ConfigError

KEY_GROUP_BYTES = 2
STATE_ID_BYTES = 4
PREFIX_BYTES = KEY_GROUP_BYTES + STATE_ID_BYTES
STAMP_BYTES = 8
_SIGN = 1 << 63

NO_EXPIRY = b"\x00"
WITH_EXPIRY = 1
END_OF_KEY_GROUPS = b"\x80\x00"
"""Greater than every key: key groups are below 32768 (0x8000)."""

TIMERS = "__timers__"
"""How timers are named in snapshots' state lists and in inspection."""


def state_id(name: str) -> bytes:
    """The 4-byte id of a state name."""
    return hashlib.blake2b(name.encode(), digest_size=STATE_ID_BYTES).digest()


TIMERS_BY_TIME = state_id("__timers_by_time__")
TIMERS_BY_KEY = state_id("__timers_by_key__")
RESERVED = {TIMERS_BY_TIME: "__timers_by_time__", TIMERS_BY_KEY: "__timers_by_key__"}


def check_ids(names: list[str]) -> dict[bytes, str]:
    """The id of every name, refusing two names with one id (or a reserved id)."""
    ids: dict[bytes, str] = dict(RESERVED)
    for name in names:
        found = state_id(name)
        other = ids.get(found)
        if other is not None and other != name:
            msg = (
                f"state names '{name}' and '{other}' have the same RocksDB state id "
                f"{found.hex()}; rename one of them"
            )
            raise ConfigError(msg)
        ids[found] = name
    return ids


def key_group_prefix(key_group: int) -> bytes:
    """The 2 bytes every key of ``key_group`` starts with."""
    return key_group.to_bytes(KEY_GROUP_BYTES, "big")


def key_group_of(key: bytes) -> int:
    """The key group a stored key belongs to."""
    return int.from_bytes(key[:KEY_GROUP_BYTES], "big")


def stamp(value: int) -> bytes:
    """A signed 64-bit number as 8 bytes whose byte order is numeric order."""
    return (value + _SIGN).to_bytes(STAMP_BYTES, "big")


def unstamp(data: bytes) -> int:
    """The number :func:`stamp` encoded."""
    return int.from_bytes(data, "big") - _SIGN


def successor(prefix: bytes) -> bytes:
    """The smallest byte string greater than every string starting with ``prefix``."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return END_OF_KEY_GROUPS
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def encode_value(data: bytes, expires_ms: int | None) -> bytes:
    """A stored value: header, optional expiry, serialized value."""
    if expires_ms is None:
        return NO_EXPIRY + data
    return b"\x01" + stamp(expires_ms) + data


def decode_value(stored: bytes) -> tuple[bytes, int | None]:
    """The serialized value and its expiry (None when it never expires)."""
    if stored[0] == WITH_EXPIRY:
        return stored[1 + STAMP_BYTES :], unstamp(stored[1 : 1 + STAMP_BYTES])
    return stored[1:], None
