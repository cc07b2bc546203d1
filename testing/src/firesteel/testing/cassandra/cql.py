"""The CQL subset the test server understands, parsed into small statement records.

Supported: ``USE``, ``CREATE KEYSPACE|TABLE [IF NOT EXISTS]``, ``DROP TABLE``,
``TRUNCATE``, ``INSERT ... VALUES (...) [USING TTL x [AND TIMESTAMP y]]``,
``UPDATE [USING ...] SET c = c + x, d = y WHERE ...`` (counters, list appends, set
unions, plain values),
``DELETE FROM ... WHERE ...`` and ``SELECT *|COUNT(*)|selectors FROM ...
[WHERE a = x AND ...] [LIMIT n]``, where a selector is ``col`` or ``WRITETIME(col)``,
each with an optional ``AS alias``. Terms are bind markers ``?`` or literals (strings, numbers,
booleans, null, blobs, uuids, lists).
"""

from __future__ import annotations

import re
import struct
import uuid
from dataclasses import dataclass, field

from firesteel.testing.cassandra.wire import SYNTAX_ERROR


class CqlError(Exception):
    """A statement the server rejects; ``code`` is the protocol error code sent back."""

    def __init__(self, code: int, message: str, extra: bytes = b"") -> None:
        super().__init__(message)
        self.code = code
        self.extra = extra


_TOKEN = re.compile(
    r"""\s*(?:
    (?P<str>'(?:[^']|'')*')
  | (?P<uuid>[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})
  | (?P<blob>0[xX][0-9a-fA-F]*)
  | (?P<num>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
  | (?P<qid>"(?:[^"]|"")*")
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<sym>[(),;=?<>+\-*.\[\]{}:])
    )""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class Literal:
    """A literal term; ``kind`` is the token kind (str, num, uuid, blob, bool, null, list)."""

    kind: str
    text: object


@dataclass(frozen=True)
class Marker:
    """The ``index``-th bind marker ``?`` of a statement."""

    index: int


Term = Literal | Marker


@dataclass(frozen=True)
class Selector:
    """One selected output: a column's value or, with ``writetime``, its write timestamp."""

    name: str
    column: str
    writetime: bool = False


@dataclass
class Statement:
    """A parsed statement; ``kind`` names it, the other fields apply per kind."""

    kind: str
    keyspace: str | None = None
    table: str | None = None
    if_not_exists: bool = False
    columns: list[str] = field(default_factory=list)
    values: list[Term] = field(default_factory=list)
    where: list[tuple[str, Term]] = field(default_factory=list)
    ttl: Term | None = None
    timestamp: Term | None = None
    column_types: dict[str, str] = field(default_factory=dict)
    partition_key: list[str] = field(default_factory=list)
    clustering: list[str] = field(default_factory=list)
    increments: dict[str, bool] = field(default_factory=dict)
    count: bool = False
    selectors: list[Selector] = field(default_factory=list)
    limit: Term | None = None
    markers: int = 0


class _Tokens:
    def __init__(self, text: str) -> None:
        self.items: list[tuple[str, str]] = []
        pos = 0
        text = text.strip().rstrip(";")
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise CqlError(
                    SYNTAX_ERROR, f"line 1:{pos} no viable alternative at {text[pos : pos + 20]!r}"
                )
            pos = m.end()
            kind = m.lastgroup or ""
            self.items.append((kind, m.group(kind)))
        self.i = 0
        self.markers = 0

    def peek(self, offset: int = 0) -> str:
        j = self.i + offset
        return self.items[j][1].lower() if j < len(self.items) else ""

    def next(self) -> tuple[str, str]:
        if self.i >= len(self.items):
            raise CqlError(SYNTAX_ERROR, "unexpected end of statement")
        item = self.items[self.i]
        self.i += 1
        return item

    def accept(self, *words: str) -> bool:
        if all(self.peek(k) == w for k, w in enumerate(words)):
            self.i += len(words)
            return True
        return False

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            raise CqlError(SYNTAX_ERROR, f"expected {' '.join(words)!r} near {self.peek()!r}")

    def ident(self) -> str:
        kind, text = self.next()
        if kind == "qid":
            return text[1:-1].replace('""', '"')
        if kind != "id":
            raise CqlError(SYNTAX_ERROR, f"expected a name, got {text!r}")
        return text.lower()

    def names(self, offset: int, name: str) -> bool:
        """Whether the token ``offset`` ahead is the identifier ``name``, quoted or not."""
        j = self.i + offset
        if j >= len(self.items):
            return False
        kind, text = self.items[j]
        if kind == "qid":
            return text[1:-1].replace('""', '"') == name
        return kind == "id" and text.lower() == name

    def qualified(self) -> tuple[str | None, str]:
        first = self.ident()
        if self.accept("."):
            return first, self.ident()
        return None, first

    def term(self) -> Term:
        kind, text = self.next()
        if text == "?":
            self.markers += 1
            return Marker(self.markers - 1)
        if text == "[":
            items: list[Term] = []
            while not self.accept("]"):
                items.append(self.term())
                self.accept(",")
            return Literal("list", items)
        if kind == "id" and text.lower() in ("true", "false"):
            return Literal("bool", text.lower() == "true")
        if kind == "id" and text.lower() == "null":
            return Literal("null", None)
        if kind in ("str", "num", "uuid", "blob"):
            return Literal(kind, text)
        raise CqlError(SYNTAX_ERROR, f"expected a value, got {text!r}")


def parse(text: str) -> Statement:
    """Parse one statement; raises :class:`CqlError` (syntax) for anything unsupported."""
    t = _Tokens(text)
    word = t.peek()
    if t.accept("use"):
        return Statement("use", keyspace=t.ident())
    if t.accept("create", "keyspace"):
        st = Statement("create_keyspace", if_not_exists=t.accept("if", "not", "exists"))
        st.keyspace = t.ident()
        return st
    if t.accept("create", "table"):
        return _create_table(t)
    if t.accept("drop", "table"):
        st = Statement("drop_table", if_not_exists=t.accept("if", "exists"))
        st.keyspace, st.table = t.qualified()
        return st
    if t.accept("truncate"):
        t.accept("table")
        st = Statement("truncate")
        st.keyspace, st.table = t.qualified()
        return st
    if t.accept("insert", "into"):
        st = _insert(t)
    elif t.accept("update"):
        st = _update(t)
    elif t.accept("delete"):
        t.expect("from")
        st = Statement("delete")
        st.keyspace, st.table = t.qualified()
        _using(t, st)
        t.expect("where")
        st.where = _where(t)
    elif t.accept("select"):
        st = _select(t)
    else:
        raise CqlError(SYNTAX_ERROR, f"line 1:0 no viable alternative at input {word!r}")
    if t.peek():
        raise CqlError(SYNTAX_ERROR, f"unexpected {t.peek()!r} at the end of the statement")
    st.markers = t.markers
    return st


def _create_table(t: _Tokens) -> Statement:
    st = Statement("create_table", if_not_exists=t.accept("if", "not", "exists"))
    st.keyspace, st.table = t.qualified()
    t.expect("(")
    while True:
        if t.accept("primary", "key"):
            t.expect("(")
            if t.accept("("):
                while not t.accept(")"):
                    st.partition_key.append(t.ident())
                    t.accept(",")
            else:
                st.partition_key.append(t.ident())
            while t.accept(","):
                st.clustering.append(t.ident())
            t.expect(")")
        else:
            name = t.ident()
            type_text = t.ident()
            if t.accept("<"):
                parameters = [t.ident()]
                while t.accept(","):
                    parameters.append(t.ident())
                type_text += "<" + ", ".join(parameters) + ">"
                t.expect(">")
            st.column_types[name] = type_text
            if t.accept("primary", "key"):
                st.partition_key.append(name)
        if t.accept(")"):
            break
        t.expect(",")
    # Table options (WITH ...) do not matter in memory.
    t.i = len(t.items)
    if not st.partition_key:
        raise CqlError(0x2200, "No PRIMARY KEY specifed (exactly one required)")
    return st


def _insert(t: _Tokens) -> Statement:
    st = Statement("insert")
    st.keyspace, st.table = t.qualified()
    t.expect("(")
    while not t.accept(")"):
        st.columns.append(t.ident())
        t.accept(",")
    t.expect("values", "(")
    while not t.accept(")"):
        st.values.append(t.term())
        t.accept(",")
    if len(st.columns) != len(st.values):
        raise CqlError(0x2200, "Unmatched column names/values")
    st.if_not_exists = t.accept("if", "not", "exists")
    _using(t, st)
    return st


def _using(t: _Tokens, st: Statement) -> None:
    if not t.accept("using"):
        return
    while True:
        if t.accept("ttl"):
            st.ttl = t.term()
        elif t.accept("timestamp"):
            st.timestamp = t.term()
        else:
            raise CqlError(SYNTAX_ERROR, f"expected TTL or TIMESTAMP near {t.peek()!r}")
        if not t.accept("and"):
            return


def _update(t: _Tokens) -> Statement:
    st = Statement("update")
    st.keyspace, st.table = t.qualified()
    _using(t, st)
    t.expect("set")
    while True:
        name = t.ident()
        t.expect("=")
        if t.names(0, name) and t.peek(1) in ("+", "-"):
            t.next()
            negative = t.next()[1] == "-"
            st.increments[name] = negative
        st.columns.append(name)
        st.values.append(t.term())
        if not t.accept(","):
            break
    t.expect("where")
    st.where = _where(t)
    return st


def _where(t: _Tokens) -> list[tuple[str, Term]]:
    clauses = []
    while True:
        name = t.ident()
        t.expect("=")
        clauses.append((name, t.term()))
        if not t.accept("and"):
            return clauses


def _select(t: _Tokens) -> Statement:
    st = Statement("select")
    if t.accept("*"):
        pass
    elif t.accept("count", "(", "*", ")"):
        st.count = True
    else:
        while True:
            st.selectors.append(_selector(t))
            if not t.accept(","):
                break
    t.expect("from")
    st.keyspace, st.table = t.qualified()
    if t.accept("where"):
        st.where = _where(t)
    if t.accept("limit"):
        st.limit = t.term()
    t.accept("allow", "filtering")
    return st


def _selector(t: _Tokens) -> Selector:
    if t.accept("writetime", "("):
        column = t.ident()
        t.expect(")")
        name, writetime = f"writetime({column})", True
    else:
        column = t.ident()
        name, writetime = column, False
    if t.accept("as"):
        name = t.ident()
    return Selector(name, column, writetime)


def encode_literal(lit: Literal, cql_type: str) -> bytes | None:
    """Serialize a literal as a value of ``cql_type`` (spec section 6)."""
    kind, text = lit.kind, lit.text
    if kind == "null":
        return None
    base = cql_type.replace(" ", "").lower()
    try:
        if base.startswith(("list<", "set<")):
            inner = base[base.index("<") + 1 : -1]
            if kind != "list" or not isinstance(text, list):
                raise ValueError
            items = [encode_literal(item, inner) for item in text if isinstance(item, Literal)]
            body = struct.pack(">i", len(items))
            for item in items:
                body += struct.pack(">i", len(item or b"")) + (item or b"")
            return body
        if base in ("text", "varchar", "ascii") and kind == "str":
            return str(text)[1:-1].replace("''", "'").encode()
        if base == "int" and kind == "num":
            return struct.pack(">i", int(str(text)))
        if base in ("bigint", "counter", "timestamp") and kind == "num":
            return struct.pack(">q", int(str(text)))
        if base in ("double", "float") and kind == "num":
            fmt = ">d" if base == "double" else ">f"
            return struct.pack(fmt, float(str(text)))
        if base == "boolean" and kind == "bool":
            return b"\x01" if text else b"\x00"
        if base == "blob" and kind == "blob":
            return bytes.fromhex(str(text)[2:])
        if base in ("uuid", "timeuuid") and kind == "uuid":
            return uuid.UUID(str(text)).bytes
    except (ValueError, struct.error) as exc:
        raise CqlError(0x2200, f"Invalid {kind} constant ({text}) for type {cql_type}") from exc
    raise CqlError(0x2200, f"Invalid {kind} constant ({text}) for type {cql_type}")
