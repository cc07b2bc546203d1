"""How many times the test server wrote each row, readable over the protocol by any client.

Every INSERT or UPDATE the server executes on a user table adds one to a row
of ``firesteel_tally.writes``::

    CREATE TABLE firesteel_tally.writes (
        tbl text,      -- 'keyspace.table'
        key text,      -- the primary key's serialized values, hex, joined by ':'
        n counter,     -- executions that wrote this row
        PRIMARY KEY (tbl, key)
    )

A table's final contents cannot show that an idempotent write was sent
twice; this can. The write-ahead-log crash tests read it with
:func:`write_counts` to prove that a segment recorded as sent is never sent
again. Faulted statements that did not run (see
:mod:`~firesteel.testing.cassandra.faults`) are not counted.
"""

from __future__ import annotations

from firesteel.testing.cassandra.store import Store, Table

KEYSPACE = "firesteel_tally"
TABLE = "writes"


def install(store: Store) -> None:
    """Create the tally table (once per server)."""
    with store.lock:
        store.create_keyspace(KEYSPACE, if_not_exists=True)
        columns = {"tbl": "text", "key": "text", "n": "counter"}
        store.create_table(Table(KEYSPACE, TABLE, columns, ["tbl"], ["key"]), if_not_exists=True)


def count(store: Store, table: Table, key: tuple[bytes, ...]) -> None:
    """Add one write of ``key`` in ``table`` (the caller holds ``store.lock``)."""
    tally = store.keyspaces[KEYSPACE][TABLE]
    name = f"{table.keyspace}.{table.name}".encode()
    tally.add((name, ":".join(part.hex() for part in key).encode()), "n", 1)


def write_counts(session: object, keyspace: str, table: str) -> dict[tuple[bytes, ...], int]:
    """Executions per primary key of ``keyspace.table``, through a driver ``session``.

    Keys are the serialized values (a bigint is 8 big-endian bytes).
    """
    rows = session.execute(  # type: ignore[attr-defined]
        f"SELECT key, n FROM {KEYSPACE}.{TABLE} WHERE tbl = %s", [f"{keyspace}.{table}"]
    )
    return {tuple(bytes.fromhex(p) for p in r.key.split(":")): r.n for r in rows}
