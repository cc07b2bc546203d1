"""CQL native protocol v4 wire format: frame header, primitive reads and writes, type codes.

See ``native_protocol_v4.spec`` (sections 2 and 3 for frames and notations,
4.2.5.2 for result metadata, 6 for value encodings).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

HEADER = struct.Struct(">BBhBi")
"""version, flags, stream, opcode, body length."""
RESPONSE_VERSION = 0x84

# Opcodes (spec section 2.4).
ERROR = 0x00
STARTUP = 0x01
READY = 0x02
OPTIONS = 0x05
SUPPORTED = 0x06
QUERY = 0x07
RESULT = 0x08
PREPARE = 0x09
EXECUTE = 0x0A
REGISTER = 0x0B
BATCH = 0x0D

# RESULT kinds (section 4.2.5).
VOID = 0x0001
ROWS = 0x0002
SET_KEYSPACE = 0x0003
PREPARED = 0x0004
SCHEMA_CHANGE = 0x0005

# Error codes (section 9).
SERVER_ERROR = 0x0000
PROTOCOL_ERROR = 0x000A
SYNTAX_ERROR = 0x2000
INVALID = 0x2200
ALREADY_EXISTS = 0x2400
UNPREPARED = 0x2500

UNSET = object()
"""A bound value the client marked unset (length -2): the column is not written."""

# Type option ids (section 4.2.5.2); collections carry their element types.
SCALAR_TYPES: dict[str, int] = {
    "ascii": 0x01,
    "bigint": 0x02,
    "blob": 0x03,
    "boolean": 0x04,
    "counter": 0x05,
    "double": 0x07,
    "float": 0x08,
    "int": 0x09,
    "timestamp": 0x0B,
    "uuid": 0x0C,
    "text": 0x0D,
    "varchar": 0x0D,
    "timeuuid": 0x0F,
    "inet": 0x10,
}
LIST = 0x20
MAP = 0x21
SET = 0x22


def _int_of(data: bytes, fmt: str) -> int:
    return int(struct.unpack(fmt, data)[0])


def encode_type(cql_type: str) -> bytes:
    """The [option] of a column type such as ``int``, ``list<text>`` or ``map<text, int>``."""
    cql_type = cql_type.replace(" ", "").lower()
    if cql_type.startswith("map<") and cql_type.endswith(">"):
        key, _, value = cql_type[len("map<") : -1].partition(",")
        return struct.pack(">H", MAP) + encode_type(key) + encode_type(value)
    for prefix, code in (("list<", LIST), ("set<", SET)):
        if cql_type.startswith(prefix) and cql_type.endswith(">"):
            return struct.pack(">H", code) + encode_type(cql_type[len(prefix) : -1])
    if cql_type not in SCALAR_TYPES:
        msg = f"type {cql_type!r} is not supported by the test server"
        raise ValueError(msg)
    return struct.pack(">H", SCALAR_TYPES[cql_type])


def string(value: str) -> bytes:
    """A [string]: short length + UTF-8."""
    data = value.encode()
    return struct.pack(">H", len(data)) + data


def short_bytes(value: bytes) -> bytes:
    """[short bytes]."""
    return struct.pack(">H", len(value)) + value


def value_bytes(value: bytes | None) -> bytes:
    """[bytes]: int length (-1 for null) + data."""
    if value is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(value)) + value


@dataclass
class Reader:
    """Reads the notations of section 3 from a frame body."""

    data: bytes
    pos: int = 0

    def take(self, n: int) -> bytes:
        """The next ``n`` bytes."""
        chunk = self.data[self.pos : self.pos + n]
        if len(chunk) != n:
            msg = "frame body ends early"
            raise ValueError(msg)
        self.pos += n
        return chunk

    def byte(self) -> int:
        """A [byte]."""
        return self.take(1)[0]

    def short(self) -> int:
        """A [short] (unsigned)."""
        return int(struct.unpack(">H", self.take(2))[0])

    def int32(self) -> int:
        """An [int] (signed)."""
        return _int_of(self.take(4), ">i")

    def int64(self) -> int:
        """A [long]."""
        return _int_of(self.take(8), ">q")

    def string(self) -> str:
        """A [string]."""
        return self.take(self.short()).decode()

    def long_string(self) -> str:
        """A [long string]."""
        return self.take(self.int32()).decode()

    def short_bytes(self) -> bytes:
        """[short bytes]."""
        return self.take(self.short())

    def value(self) -> bytes | object | None:
        """A [value]: bytes, None (null) or :data:`UNSET`."""
        n = self.int32()
        if n == -1:
            return None
        if n == -2:
            return UNSET
        return self.take(n)

    def string_map(self) -> dict[str, str]:
        """A [string map]."""
        return {self.string(): self.string() for _ in range(self.short())}
