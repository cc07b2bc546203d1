"""In-memory keyspaces and tables: cells keyed by primary key, last write wins by timestamp."""

from __future__ import annotations

import struct
import threading
import time
from dataclasses import dataclass, field

from firesteel.testing.cassandra.cql import CqlError
from firesteel.testing.cassandra.wire import ALREADY_EXISTS, INVALID, string

ROW_MARKER = ""
"""The pseudo-column an INSERT writes so a row with only key columns exists."""


@dataclass
class Cell:
    """One written value; ``value`` None is a tombstone, ``expires`` is epoch seconds or None."""

    timestamp: int
    value: bytes | None
    expires: float | None = None

    def live(self, now: float) -> bool:
        """True while the cell has a value and has not expired."""
        return self.value is not None and (self.expires is None or self.expires > now)


@dataclass
class Table:
    """A table: column types in declaration order, key columns, and its rows."""

    keyspace: str
    name: str
    column_types: dict[str, str]
    partition_key: list[str]
    clustering: list[str]
    rows: dict[tuple[bytes, ...], dict[str, Cell]] = field(default_factory=dict)

    @property
    def primary_key(self) -> list[str]:
        """Partition key then clustering columns."""
        return self.partition_key + self.clustering

    def column_type(self, column: str) -> str:
        """The declared type of ``column``; an InvalidRequest naming it if the table has none."""
        if column not in self.column_types:
            msg = f"Undefined column name {column} in table {self.keyspace}.{self.name}"
            raise CqlError(INVALID, msg)
        return self.column_types[column]

    def key_of(self, values: dict[str, bytes | None]) -> tuple[bytes, ...]:
        """The primary key tuple; every key column must be given and non-null."""
        key = []
        for column in self.primary_key:
            value = values.get(column)
            if value is None:
                msg = f"Invalid null value in condition for column {column}"
                raise CqlError(INVALID, msg)
            key.append(value)
        return tuple(key)

    def write(
        self,
        key: tuple[bytes, ...],
        cells: dict[str, bytes | None],
        timestamp: int,
        ttl: int | None,
    ) -> None:
        """Write cells; an older timestamp than the stored one loses (a tie keeps the larger)."""
        row = self.rows.setdefault(key, {})
        expires = time.time() + ttl if ttl else None
        for column, value in cells.items():
            old = row.get(column)
            if old is not None and (old.timestamp, old.value or b"") > (timestamp, value or b""):
                continue
            row[column] = Cell(timestamp, value, expires)

    def add(self, key: tuple[bytes, ...], column: str, delta: int) -> None:
        """Counter increment: counters ignore timestamps, every update adds."""
        row = self.rows.setdefault(key, {})
        old = row.get(column)
        current = struct.unpack(">q", old.value)[0] if old and old.value else 0
        row[column] = Cell(0, struct.pack(">q", current + delta))

    def append(
        self,
        key: tuple[bytes, ...],
        column: str,
        items: bytes | None,
        timestamp: int,
        ttl: int | None,
    ) -> None:
        """``c = c + items`` on a list (appended), set (union) or map (entries put) column.

        Cassandra keeps one cell per element, named by a fresh timeuuid for a
        list, so an append executed twice adds its elements twice whatever
        the timestamp; a set element is named by its value and a map entry by
        its key, so adding it again changes nothing (a map entry takes the new
        value). This server keeps the collection as one serialized value with
        the newest timestamp, which gives the same reads.
        """
        if items is None:
            return
        row = self.rows.setdefault(key, {})
        old = row.get(column)
        kind = self.column_types[column].partition("<")[0]
        width = 2 if kind == "map" else 1
        current = old.value if old is not None and old.live(time.time()) else None
        elements = _elements(current, width)
        for element in _elements(items, width):
            if kind == "map":
                elements = [e for e in elements if e[0] != element[0]]
            if kind == "list" or element not in elements:
                elements.append(element)
        if kind != "list":
            elements.sort()
        body = struct.pack(">i", len(elements)) + b"".join(
            struct.pack(">i", len(part)) + part for element in elements for part in element
        )
        stamp = max(timestamp, old.timestamp) if old is not None else timestamp
        row[column] = Cell(stamp, body, time.time() + ttl if ttl else None)

    def writetime(self, key: tuple[bytes, ...], column: str) -> int | None:
        """The write timestamp (microseconds) of a live cell, None for null or expired."""
        cell = self.rows.get(key, {}).get(column)
        return cell.timestamp if cell is not None and cell.live(time.time()) else None

    def live_row(self, key: tuple[bytes, ...]) -> dict[str, bytes] | None:
        """The row with primary key ``key`` as column -> value, None when it has no live cell."""
        now = time.time()
        cells = {c: cell.value for c, cell in self.rows.get(key, {}).items() if cell.live(now)}
        if not cells:
            return None
        values = {c: v for c, v in cells.items() if v is not None and c != ROW_MARKER}
        values.update(zip(self.primary_key, key, strict=True))
        return values

    def live_rows(self) -> list[tuple[tuple[bytes, ...], dict[str, bytes]]]:
        """Rows with at least one live cell, sorted by key bytes, as column -> value."""
        result = []
        for key in sorted(self.rows):
            values = self.live_row(key)
            if values is not None:
                result.append((key, values))
        return result


class Store:
    """All keyspaces; one lock serializes every statement (enough for tests)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.keyspaces: dict[str, dict[str, Table]] = {}
        self.schema_version = 0
        self.statements = 0
        self.rows_written = 0

    def create_keyspace(self, name: str, if_not_exists: bool) -> bool:
        """Create a keyspace; False when it existed and ``if_not_exists`` was asked."""
        if name in self.keyspaces:
            if if_not_exists:
                return False
            raise CqlError(
                ALREADY_EXISTS, f"Keyspace {name} already exists", string(name) + string("")
            )
        self.keyspaces[name] = {}
        self.schema_version += 1
        return True

    def keyspace(self, name: str | None) -> dict[str, Table]:
        """The tables of ``name``; InvalidRequest if it does not exist."""
        if name is None:
            msg = (
                "No keyspace has been specified. "
                "USE a keyspace, or explicitly specify keyspace.tablename"
            )
            raise CqlError(INVALID, msg)
        if name not in self.keyspaces:
            raise CqlError(INVALID, f"Keyspace '{name}' does not exist")
        return self.keyspaces[name]

    def create_table(self, table: Table, if_not_exists: bool) -> bool:
        """Create a table; False when it existed and ``if_not_exists`` was asked."""
        tables = self.keyspace(table.keyspace)
        if table.name in tables:
            if if_not_exists:
                return False
            msg = f"Object {table.keyspace}.{table.name} already exists"
            raise CqlError(ALREADY_EXISTS, msg, string(table.keyspace) + string(table.name))
        for column in table.primary_key:
            table.column_type(column)
        tables[table.name] = table
        self.schema_version += 1
        return True

    def table(self, keyspace: str | None, name: str | None) -> Table:
        """An existing table; InvalidRequest naming it otherwise."""
        tables = self.keyspace(keyspace)
        if name not in tables:
            raise CqlError(INVALID, f"unconfigured table {name}")
        return tables[name]


def _elements(body: bytes | None, width: int) -> list[tuple[bytes, ...]]:
    """The serialized elements of a list or set value (``[int n][int len, bytes]*n``,
    ``width`` 1) or the entries of a map (``[int n]([int len, bytes] key, value)*n``, 2)."""
    if not body:
        return []
    (count,) = struct.unpack_from(">i", body)
    elements, pos = [], 4
    for _ in range(count):
        parts = []
        for _ in range(width):
            (size,) = struct.unpack_from(">i", body, pos)
            parts.append(body[pos + 4 : pos + 4 + size])
            pos += 4 + size
        elements.append(tuple(parts))
    return elements
