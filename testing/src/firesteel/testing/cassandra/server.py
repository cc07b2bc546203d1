"""A threaded CQL native-protocol v4 server over :class:`Store`, for the real cassandra-driver.

One thread per connection; each frame is answered in order. The driver's
connect-time queries (``system.local``, ``system.peers(_v2)``, ``system_schema.*``)
get fixed answers: one local node (Murmur3, token 0, ``release_version`` 3.11 so
the driver skips the 4.x virtual schema) and empty schema tables, so the
driver's metadata stays empty and statement metadata comes from PREPARE.
Other protocol versions get the "unsupported protocol version" error the
driver downgrades on. Requests may be faulted on purpose: see
:mod:`~firesteel.testing.cassandra.faults`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import socket
import socketserver
import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from firesteel.testing.cassandra import faults, tally, wire
from firesteel.testing.cassandra.cql import (
    CqlError,
    Literal,
    Marker,
    Statement,
    Term,
    encode_literal,
    parse,
)
from firesteel.testing.cassandra.store import ROW_MARKER, Store, Table

_log = logging.getLogger(__name__)

_HOST_ID = uuid.UUID("5a1f0000-0000-4000-8000-000000000001")
_LOCAL_COLUMNS = [
    ("key", "text"),
    ("bootstrapped", "text"),
    ("broadcast_address", "inet"),
    ("cluster_name", "text"),
    ("cql_version", "text"),
    ("data_center", "text"),
    ("host_id", "uuid"),
    ("listen_address", "inet"),
    ("partitioner", "text"),
    ("rack", "text"),
    ("release_version", "text"),
    ("rpc_address", "inet"),
    ("schema_version", "uuid"),
    ("tokens", "set<text>"),
]
Spec = list[tuple[str, str]]


@dataclass
class Prepared:
    """A prepared statement: its text and parse, bind-marker specs and result columns."""

    text: str
    statement: Statement
    table: Table | None
    binds: Spec
    result: Spec


class CqlServer(socketserver.ThreadingTCPServer):
    """Listens on ``(host, port)``; ``store`` holds the data, ``prepared`` the statements."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, _Connection)
        self.store = Store()
        self.prepared: dict[bytes, Prepared] = {}
        faults.install(self.store)
        tally.install(self.store)

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self.server_address[1])


class _Connection(socketserver.BaseRequestHandler):
    server: CqlServer

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.keyspace: str | None = None
        reader = sock.makefile("rb")
        try:
            while True:
                header = reader.read(wire.HEADER.size)
                if len(header) < wire.HEADER.size:
                    return
                version, _flags, stream, opcode, length = wire.HEADER.unpack(header)
                body = reader.read(length)
                if version & 0x7F != 4:
                    message = (
                        f"Invalid or unsupported protocol version ({version & 0x7F}); "
                        "supported versions are (4/v4)"
                    )
                    sock.sendall(
                        _frame(
                            stream,
                            wire.ERROR,
                            struct.pack(">i", wire.PROTOCOL_ERROR) + wire.string(message),
                        )
                    )
                    continue
                sock.sendall(self.answer(stream, opcode, body))
        except _Dropped:
            _log.info("fault: dropping the connection of %s", self.client_address)
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        except (ConnectionError, OSError):
            return

    def answer(self, stream: int, opcode: int, body: bytes) -> bytes:
        try:
            op, payload = self.dispatch(opcode, wire.Reader(body))
        except CqlError as exc:
            op, payload = (
                wire.ERROR,
                struct.pack(">i", exc.code) + wire.string(str(exc)) + exc.extra,
            )
        except (ValueError, struct.error, KeyError, IndexError) as exc:
            _log.exception("protocol error")
            op, payload = (
                wire.ERROR,
                struct.pack(">i", wire.PROTOCOL_ERROR) + wire.string(repr(exc)),
            )
        return _frame(stream, op, payload)

    def dispatch(self, opcode: int, r: wire.Reader) -> tuple[int, bytes]:
        if opcode == wire.OPTIONS:
            options = {"CQL_VERSION": ["3.4.4"], "COMPRESSION": []}
            body = struct.pack(">H", len(options))
            for k, vs in options.items():
                body += (
                    wire.string(k)
                    + struct.pack(">H", len(vs))
                    + b"".join(wire.string(v) for v in vs)
                )
            return wire.SUPPORTED, body
        if opcode in (wire.STARTUP, wire.REGISTER):
            return wire.READY, b""
        if opcode == wire.QUERY:
            text = r.long_string()
            st = parse(text)
            table = self.table_for(st)
            params = _params(r)
            return wire.RESULT, self.faulted(
                [(text, st, table)], params.consistency, lambda: self.run(st, table, params)
            )
        if opcode == wire.PREPARE:
            return wire.RESULT, self.prepare(r.long_string())
        if opcode == wire.EXECUTE:
            prepared = self.lookup(r.short_bytes())
            params = _params(r)
            return wire.RESULT, self.faulted(
                [(prepared.text, prepared.statement, prepared.table)],
                params.consistency,
                lambda: self.run(prepared.statement, prepared.table, params),
            )
        if opcode == wire.BATCH:
            return wire.RESULT, self.batch(r)
        raise CqlError(wire.PROTOCOL_ERROR, f"opcode {opcode:#x} is not supported")

    def lookup(self, statement_id: bytes) -> Prepared:
        with self.server.store.lock:
            prepared = self.server.prepared.get(statement_id)
        if prepared is None:
            raise CqlError(
                wire.UNPREPARED, "Prepared query not found", wire.short_bytes(statement_id)
            )
        return prepared

    def table_for(self, st: Statement) -> Table | None:
        if st.kind in ("insert", "update", "delete", "select", "truncate") and not _system(st):
            with self.server.store.lock:
                return self.server.store.table(st.keyspace or self.keyspace, st.table)
        return None

    def prepare(self, text: str) -> bytes:
        st = parse(text)
        table = self.table_for(st)
        binds: Spec = []
        result: Spec = []
        if table is not None:
            binds = _bind_specs(st, table)
            missing = [c for c in table.primary_key if c not in st.columns]
            if st.kind == "insert" and missing:
                msg = f"Some primary key parts are missing: {', '.join(missing)}"
                raise CqlError(wire.INVALID, msg)
            _check_counter_use(st, table)
            if st.kind == "update":
                _check_key_restriction(st, table)
            if st.kind == "select":
                result = _select_spec(st, table)
        statement_id = hashlib.md5(f"{self.keyspace}|{text}".encode()).digest()
        with self.server.store.lock:
            self.server.prepared[statement_id] = Prepared(text, st, table, binds, result)
        pk_indexes = []
        if table is not None:
            names = [n for n, _ in binds]
            pk_indexes = [names.index(c) for c in table.partition_key if c in names]
            if len(pk_indexes) != len(table.partition_key):
                pk_indexes = []
        ks, name = (table.keyspace, table.name) if table else ("", "")
        body = struct.pack(">i", wire.PREPARED) + wire.short_bytes(statement_id)
        body += struct.pack(">iii", 0x0001, len(binds), len(pk_indexes))
        body += b"".join(struct.pack(">H", i) for i in pk_indexes)
        body += wire.string(ks) + wire.string(name)
        body += b"".join(wire.string(n) + wire.encode_type(t) for n, t in binds)
        return body + _metadata(result, ks, name)

    def batch(self, r: wire.Reader) -> bytes:
        batch_type = r.byte()
        items: list[tuple[str, Statement, Table | None, list[object]]] = []
        for _ in range(r.short()):
            kind = r.byte()
            if kind == 0:
                text = r.long_string()
                st = parse(text)
                table = self.table_for(st)
            else:
                prepared = self.lookup(r.short_bytes())
                text, st, table = prepared.text, prepared.statement, prepared.table
            items.append((text, st, table, [r.value() for _ in range(r.short())]))
        consistency = r.short()
        flags = r.byte()
        if flags & 0x10:
            r.short()
        timestamp = r.int64() if flags & 0x20 else None

        def run_all() -> bytes:
            with self.server.store.lock:
                for _, st, table, values in items:
                    self.run(st, table, _Params(values, timestamp, consistency))
            return struct.pack(">i", wire.VOID)

        write_type = ("BATCH", "UNLOGGED_BATCH", "COUNTER")[batch_type]
        statements = [(text, st, table) for text, st, table, _ in items]
        return self.faulted(statements, consistency, run_all, write_type)

    def faulted(
        self,
        statements: list[tuple[str, Statement, Table | None]],
        consistency: int,
        execute: Callable[[], bytes],
        write_type: str = "",
    ) -> bytes:
        """``execute()``'s reply, unless a fault rule takes this request (see ``faults``)."""
        texts = [text for text, st, table in statements if _faultable(st, table)]
        fault = faults.take(self.server.store, texts) if texts else None
        if fault is None:
            return execute()
        _log.info("fault: %s on %r", fault.kind, texts[0])
        if fault.kind == "slow":
            reply = execute()
            time.sleep(fault.delay_ms / 1000)
            return reply
        if fault.applied:
            execute()
        if fault.kind == "drop":
            raise _Dropped
        if not write_type:
            counter = any(
                table is not None and table.column_types.get(column) == "counter"
                for _, st, table in statements
                for column in st.increments
            )
            write_type = "COUNTER" if counter else "SIMPLE"
        raise fault.error(consistency, write_type)

    def run(self, st: Statement, table: Table | None, params: _Params) -> bytes:
        values, default_ts = params.values, params.timestamp
        store = self.server.store
        with store.lock:
            store.statements += 1
            if st.kind == "use":
                store.keyspace(st.keyspace)
                self.keyspace = st.keyspace
                return struct.pack(">i", wire.SET_KEYSPACE) + wire.string(st.keyspace or "")
            if st.kind == "select" and _system(st):
                return _system_rows(st, store)
            if st.kind == "create_keyspace":
                created = store.create_keyspace(st.keyspace or "", st.if_not_exists)
                return _schema_change(created, "KEYSPACE", st.keyspace or "")
            if st.kind == "create_table":
                ks = st.keyspace or self.keyspace
                new = Table(
                    ks or "", st.table or "", st.column_types, st.partition_key, st.clustering
                )
                store.keyspace(ks)
                created = store.create_table(new, st.if_not_exists)
                return _schema_change(created, "TABLE", new.keyspace, new.name)
            if st.kind == "drop_table":
                tables = store.keyspace(st.keyspace or self.keyspace)
                if tables.pop(st.table or "", None) is None and not st.if_not_exists:
                    raise CqlError(wire.INVALID, f"Table '{st.table}' doesn't exist")
                store.schema_version += 1
                return _schema_change(
                    True, "TABLE", st.keyspace or self.keyspace or "", st.table or "", "DROPPED"
                )
            assert table is not None, st.kind
            _check_counter_use(st, table)
            if st.kind == "truncate":
                table.rows.clear()
                return struct.pack(">i", wire.VOID)
            bound = _Binder(table, values)
            timestamp = bound.int(st.timestamp, "bigint") if st.timestamp else None
            if timestamp is None:
                timestamp = default_ts if default_ts is not None else int(time.time() * 1_000_000)
            if st.kind == "select":
                return self.select(st, table, bound)
            where = bound.where(st.where)
            if st.kind == "delete":
                key = table.key_of(where)
                columns = [c for c in table.column_types if c not in table.primary_key]
                table.write(key, dict.fromkeys([ROW_MARKER, *columns]), timestamp, None)
                return struct.pack(">i", wire.VOID)
            ttl = bound.int(st.ttl, "int") if st.ttl else None
            cells: dict[str, bytes | None] = {}
            for column, term in zip(st.columns, st.values, strict=True):
                value = bound.value(term, table.column_type(column))
                if value is not wire.UNSET:
                    cells[column] = value if isinstance(value, bytes) else None
            if st.kind == "insert":
                if table.keyspace == faults.KEYSPACE:
                    faults.validate(cells)
                key = table.key_of({**where, **cells})
                regular = {c: v for c, v in cells.items() if c not in table.primary_key}
                table.write(key, {ROW_MARKER: b"", **regular}, timestamp, ttl)
            else:
                key = table.key_of(where)
                for column, negative in st.increments.items():
                    if table.column_types[column] != "counter":
                        table.append(key, column, cells.pop(column, None), timestamp, ttl)
                        continue
                    delta = struct.unpack(">q", cells.pop(column) or b"\0" * 8)[0]
                    table.add(key, column, -delta if negative else delta)
                if cells:
                    table.write(key, cells, timestamp, ttl)
            store.rows_written += 1
            if table.keyspace not in (faults.KEYSPACE, tally.KEYSPACE):
                tally.count(store, table, key)
            return struct.pack(">i", wire.VOID)

    def select(self, st: Statement, table: Table, bound: _Binder) -> bytes:
        where = bound.where(st.where)
        limit = bound.int(st.limit, "int") if st.limit else None
        if set(table.primary_key) <= where.keys():
            # A lookup by primary key: one row, no scan (what Cassandra does too).
            key = tuple(where[c] or b"" for c in table.primary_key)
            row = table.live_row(key)
            candidates = [] if row is None else [(key, row)]
        else:
            candidates = table.live_rows()
        rows = [(k, v) for k, v in candidates if all(v.get(c) == w for c, w in where.items())]
        if limit is not None:
            rows = rows[:limit]
        if st.count:
            spec: Spec = [("count", "bigint")]
            data = [{"count": struct.pack(">q", len(rows))}]
        else:
            spec, data = _select_spec(st, table), [_selected(st, table, k, v) for k, v in rows]
        return _rows(spec, data, table.keyspace, table.name)


class _Binder:
    """Resolves terms to serialized values: bind markers by position, literals by type."""

    def __init__(self, table: Table, values: list[object]) -> None:
        self.table = table
        self.values = values

    def value(self, term: Term, cql_type: str) -> bytes | object | None:
        if isinstance(term, Marker):
            if term.index >= len(self.values):
                raise CqlError(
                    wire.INVALID, f"There were {len(self.values)} markers(?) in CQL but more values"
                )
            return self.values[term.index]
        assert isinstance(term, Literal)
        return encode_literal(term, cql_type)

    def where(self, clauses: list[tuple[str, Term]]) -> dict[str, bytes | None]:
        """Restriction values by column; an unset one is refused as Cassandra does."""
        result: dict[str, bytes | None] = {}
        for column, term in clauses:
            value = self.value(term, self.table.column_type(column))
            if value is wire.UNSET:
                raise CqlError(wire.INVALID, f"Invalid unset value for column {column}")
            result[column] = value if isinstance(value, bytes) else None
        return result

    def int(self, term: Term, cql_type: str) -> int | None:
        raw = self.value(term, cql_type)
        if raw is None or raw is wire.UNSET:
            return None
        assert isinstance(raw, bytes)
        return int(struct.unpack(">i" if cql_type == "int" else ">q", raw)[0])


class _Dropped(Exception):
    """A fault closes the connection instead of answering."""


@dataclass
class _Params:
    """Query parameters (section 4.1.4) the server uses."""

    values: list[object]
    timestamp: int | None
    consistency: int


def _params(r: wire.Reader) -> _Params:
    """The bound values, the client timestamp and the consistency of a QUERY or EXECUTE."""
    consistency = r.short()
    flags = r.byte()
    values: list[object] = []
    if flags & 0x01:
        for _ in range(r.short()):
            if flags & 0x40:
                r.string()
            values.append(r.value())
    if flags & 0x04:
        r.int32()
    if flags & 0x08:
        r.take(r.int32())
    if flags & 0x10:
        r.short()
    timestamp = r.int64() if flags & 0x20 else None
    return _Params(values, timestamp, consistency)


def _bind_specs(st: Statement, table: Table) -> Spec:
    specs: list[tuple[int, str, str]] = []
    pairs = list(zip(st.columns, st.values, strict=True)) + st.where
    for column, term in pairs:
        if isinstance(term, Marker):
            specs.append((term.index, column, table.column_type(column)))
    extras: list[tuple[Term | None, str, str]] = [
        (st.ttl, "[ttl]", "int"),
        (st.timestamp, "[timestamp]", "bigint"),
        (st.limit, "[limit]", "int"),
    ]
    for extra, name, cql_type in extras:
        if isinstance(extra, Marker):
            specs.append((extra.index, name, cql_type))
    return [(n, t) for _, n, t in sorted(specs)]


def _select_spec(st: Statement, table: Table) -> Spec:
    if st.count:
        return [("count", "bigint")]
    if not st.selectors:
        return list(table.column_types.items())
    return [
        (s.name, "bigint" if s.writetime else table.column_type(s.column)) for s in st.selectors
    ]


def _selected(
    st: Statement, table: Table, key: tuple[bytes, ...], values: dict[str, bytes]
) -> dict[str, bytes]:
    """One result row by output name; WRITETIME of a key column is refused as Cassandra does."""
    if not st.selectors:
        return values
    row: dict[str, bytes] = {}
    for s in st.selectors:
        if not s.writetime:
            if s.column in values:
                row[s.name] = values[s.column]
            continue
        if s.column in table.primary_key:
            msg = f"Cannot use selection function writeTime on PRIMARY KEY part {s.column}"
            raise CqlError(wire.INVALID, msg)
        stamp = table.writetime(key, s.column)
        if stamp is not None:
            row[s.name] = struct.pack(">q", stamp)
    return row


def _metadata(spec: Spec, keyspace: str, table: str) -> bytes:
    body = struct.pack(">ii", 0x0001, len(spec)) + wire.string(keyspace) + wire.string(table)
    return body + b"".join(wire.string(n) + wire.encode_type(t) for n, t in spec)


def _rows(spec: Spec, rows: list[dict[str, bytes]], keyspace: str, table: str) -> bytes:
    body = (
        struct.pack(">i", wire.ROWS)
        + _metadata(spec, keyspace, table)
        + struct.pack(">i", len(rows))
    )
    for row in rows:
        body += b"".join(wire.value_bytes(row.get(name)) for name, _ in spec)
    return body


def _schema_change(
    changed: bool, target: str, keyspace: str, table: str = "", change: str = "CREATED"
) -> bytes:
    if not changed:
        return struct.pack(">i", wire.VOID)
    body = (
        struct.pack(">i", wire.SCHEMA_CHANGE)
        + wire.string(change)
        + wire.string(target)
        + wire.string(keyspace)
    )
    return body + (wire.string(table) if target == "TABLE" else b"")


def _system(st: Statement) -> bool:
    return (st.keyspace or "").startswith("system")


def _faultable(st: Statement, table: Table | None) -> bool:
    """Data statements of user tables: never the driver's own queries nor the rules table."""
    data = st.kind in ("insert", "update", "delete", "select", "truncate")
    return data and table is not None and table.keyspace not in (faults.KEYSPACE, tally.KEYSPACE)


def _system_rows(st: Statement, store: Store) -> bytes:
    ks, name = st.keyspace or "", st.table or ""
    if ks == "system" and name == "local":
        version = uuid.UUID(int=store.schema_version + 1).bytes
        row = {
            "key": b"local",
            "bootstrapped": b"COMPLETED",
            "broadcast_address": socket.inet_aton("127.0.0.1"),
            "cluster_name": b"firesteel-test",
            "cql_version": b"3.4.4",
            "data_center": b"datacenter1",
            "host_id": _HOST_ID.bytes,
            "listen_address": socket.inet_aton("127.0.0.1"),
            "partitioner": b"org.apache.cassandra.dht.Murmur3Partitioner",
            "rack": b"rack1",
            "release_version": b"3.11.16",
            "rpc_address": socket.inet_aton("127.0.0.1"),
            "schema_version": version,
            "tokens": struct.pack(">ii", 1, 1) + b"0",
        }
        return _rows(_LOCAL_COLUMNS, [row], ks, name)
    if ks == "system" and name in ("peers", "peers_v2"):
        return _rows(
            [("peer", "inet"), ("rpc_address", "inet"), ("schema_version", "uuid")], [], ks, name
        )
    return _rows([("keyspace_name", "text")], [], ks, name)


def _frame(stream: int, opcode: int, body: bytes) -> bytes:
    return wire.HEADER.pack(wire.RESPONSE_VERSION, 0, stream, opcode, len(body)) + body


def serve(port: int, host: str = "127.0.0.1") -> CqlServer:
    """Start a server in a daemon thread; call ``shutdown()`` then ``server_close()`` to stop it."""
    server = CqlServer((host, port))
    threading.Thread(target=server.serve_forever, name=f"cql-{server.port}", daemon=True).start()
    return server


def _check_counter_use(st: Statement, table: Table) -> None:
    """Cassandra's rules: a counter table takes only ``c = c +/- x`` updates, without
    TTL or timestamp; ``c = c + x`` needs a counter, list or set column (this server
    does not remove from collections)."""
    counters = {c for c, kind in table.column_types.items() if kind == "counter"}
    if counters and st.kind == "insert":
        raise CqlError(
            wire.INVALID, "INSERT statements are not allowed on counter tables, use UPDATE instead"
        )
    if counters and st.kind == "update":
        plain = [c for c in st.columns if c not in st.increments and c in counters]
        if plain:
            raise CqlError(wire.INVALID, f"Cannot set the value of counter column {plain[0]}")
        if st.ttl or st.timestamp:
            raise CqlError(
                wire.INVALID, "Cannot provide custom TTL or timestamp for counter updates"
            )
    for column, negative in st.increments.items():
        kind = table.column_type(column)
        if kind == "counter" or (kind.startswith(("list<", "set<", "map<")) and not negative):
            continue
        msg = f"Invalid operation ({column} = {column} {'-' if negative else '+'} ?) for {kind}"
        raise CqlError(wire.INVALID, msg)


def _check_key_restriction(st: Statement, table: Table) -> None:
    """Cassandra's rules for UPDATE: the WHERE clause names the whole primary key and
    nothing else, and SET names no key column."""
    restricted = [column for column, _ in st.where]
    regular = [c for c in restricted if c not in table.primary_key]
    if regular:
        msg = f"Non PRIMARY KEY columns found in where clause: {', '.join(regular)}"
        raise CqlError(wire.INVALID, msg)
    missing = [c for c in table.primary_key if c not in restricted]
    if missing:
        msg = f"Some primary key parts are missing: {', '.join(missing)}"
        raise CqlError(wire.INVALID, msg)
    keys_set = [c for c in st.columns if c in table.primary_key]
    if keys_set:
        raise CqlError(wire.INVALID, f"PRIMARY KEY part {keys_set[0]} found in SET part")
