"""Injectable faults of the CQL test server, armed over the protocol by any client.

A fault rule is a row of the table ``firesteel_faults.rules``, which every
server creates at startup::

    CREATE TABLE firesteel_faults.rules (
        id text PRIMARY KEY,  -- any name; rules are tried in id order
        kind text,            -- one of KINDS
        remaining int,        -- how many more matching requests the rule affects
        skip int,             -- matching requests to let through first
        match text,           -- substring of the statement's CQL, case-insensitive
        delay_ms int,         -- kind 'slow': how long the reply is held back
        applied boolean       -- 'write_timeout' / 'drop': run the statement first
    )

So ``INSERT INTO firesteel_faults.rules ...`` arms a rule, ``TRUNCATE
firesteel_faults.rules`` (or a ``DELETE`` by id) disarms, and ``SELECT`` shows
what is left. Rules live in the server process, so they hit every client,
including Spark's workers.

Faults apply to the QUERY, EXECUTE and BATCH requests of data statements
(INSERT, UPDATE, DELETE, SELECT, TRUNCATE), matched against the CQL text (the
text it was prepared from for EXECUTE, any statement of a BATCH). Never to
schema statements, ``USE``, the driver's ``system*`` queries or the rules
table itself, so connecting and disarming always work. Rules are tried in id
order; a rule with ``remaining > 0`` whose ``match`` the request contains
first counts down its ``skip`` (the request goes on to the next rule), then
faults the request, which no later rule sees. Counting is atomic with the
rest of the store, so it holds across connections and processes.

A faulted statement is not executed (not counted in ``Store.statements`` /
``rows_written``) unless ``applied`` is set or the kind is ``slow``. Real
Cassandra gives no such promise for a write timeout: the write may have
reached some or all replicas. ``applied=true`` is that case (executed, then
the timeout sent), the harder one for a client that retries.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from firesteel.testing.cassandra import wire
from firesteel.testing.cassandra.cql import CqlError
from firesteel.testing.cassandra.store import Store, Table

KEYSPACE = "firesteel_faults"
TABLE = "rules"
COLUMNS = {
    "id": "text",
    "kind": "text",
    "remaining": "int",
    "skip": "int",
    "match": "text",
    "delay_ms": "int",
    "applied": "boolean",
}

UNAVAILABLE = 0x1000
OVERLOADED = 0x1001
WRITE_TIMEOUT = 0x1100
READ_TIMEOUT = 0x1200
ERRORS = {
    "unavailable": UNAVAILABLE,
    "overloaded": OVERLOADED,
    "write_timeout": WRITE_TIMEOUT,
    "read_timeout": READ_TIMEOUT,
}
"""Kinds answered with an ERROR frame (spec section 9), by error code."""
KINDS = (*ERRORS, "drop", "slow")
APPLICABLE = ("write_timeout", "drop")
"""Kinds that may run the statement before failing (``applied``)."""


@dataclass(frozen=True)
class Fault:
    """One request's fault, taken from a rule."""

    kind: str
    delay_ms: int = 0
    applied: bool = False

    def error(self, consistency: int, write_type: str) -> CqlError:
        """The ERROR of an error kind, with the body its code carries (spec section 9)."""
        code = ERRORS[self.kind]
        cl = struct.pack(">H", consistency)
        if code == UNAVAILABLE:
            message, extra = "Cannot achieve consistency level", cl + struct.pack(">ii", 1, 0)
        elif code == WRITE_TIMEOUT:
            message = "Operation timed out - received only 0 responses."
            extra = cl + struct.pack(">ii", 0, 1) + wire.string(write_type)
        elif code == READ_TIMEOUT:
            message = "Operation timed out - received only 0 responses."
            extra = cl + struct.pack(">ii", 0, 1) + b"\x00"
        else:
            message, extra = "Server is overloaded (injected fault)", b""
        return CqlError(code, message, extra)


def install(store: Store) -> None:
    """Create the rules table (once per server)."""
    with store.lock:
        store.create_keyspace(KEYSPACE, if_not_exists=True)
        store.create_table(Table(KEYSPACE, TABLE, dict(COLUMNS), ["id"], []), if_not_exists=True)


def validate(cells: dict[str, bytes | None]) -> None:
    """Refuse a rule the server would never fire, so a typo fails the INSERT, not the test."""
    kind = (cells.get("kind") or b"").decode()
    if kind not in KINDS:
        msg = f"fault kind {kind!r} is not one of {', '.join(KINDS)}"
        raise CqlError(wire.INVALID, msg)
    if cells.get("applied") == b"\x01" and kind not in APPLICABLE:
        msg = f"'applied' is for {' and '.join(APPLICABLE)} only, not {kind}"
        raise CqlError(wire.INVALID, msg)


def take(store: Store, texts: list[str]) -> Fault | None:
    """The fault for a request of statements ``texts``, consuming one use of its rule."""
    with store.lock:
        table = store.keyspaces.get(KEYSPACE, {}).get(TABLE)
        if table is None:
            return None
        lowered = [t.lower() for t in texts]
        for key, row in table.live_rows():
            remaining = _int(row.get("remaining"))
            match = (row.get("match") or b"").decode().lower()
            if remaining <= 0 or not any(match in text for text in lowered):
                continue
            cells = table.rows[key]
            skip = _int(row.get("skip"))
            if skip > 0:
                cells["skip"].value = struct.pack(">i", skip - 1)
                continue
            cells["remaining"].value = struct.pack(">i", remaining - 1)
            return Fault(
                (row.get("kind") or b"").decode(),
                _int(row.get("delay_ms")),
                row.get("applied") == b"\x01",
            )
    return None


def _int(value: bytes | None) -> int:
    return int(struct.unpack(">i", value)[0]) if value else 0
