"""Value decoding (source) and encoding (sink): raw bytes, JSON or Avro.

JSON decodes a whole consume() chunk at once with pyarrow's JSON reader and
falls back to one record at a time only to find the records that fail, so a
clean chunk never becomes Python objects. Avro uses fastavro (bare schemaless
records, schema inline or from a file; no Schema Registry framing).

What decodes into a row, and what goes to the source's error policy:

* Avro: a value is a row only when fastavro reads one record of
  ``value.schema`` that uses every byte of it (fastavro stops after one record,
  so garbage often reads as a short record followed by leftovers) and that
  record validates against the schema (``fastavro.validation``: an ``int``
  field holds a 32-bit value...). Anything else is bad, with fastavro's reason.
* JSON: a value is a row only when it is one JSON object that pyarrow's reader
  takes under ``value.schema``: fields a Spark JSON schema declares
  ``nullable: false`` must be present and not null; absent nullable fields are
  null. A JSON ``null``, an array or a scalar is bad (and never reaches
  pyarrow, whose reader crashes on a ``null`` first in a block).
* A null value (a Kafka tombstone) is a row whose value columns are all null
  only with an Avro schema whose every field is nullable (a union with
  ``"null"``): a null can never reach a non-nullable column. Otherwise it is
  bad. With JSON it is always bad, since DDL columns are nullable by default
  and so say nothing about whether a row of nulls is meant: to keep
  tombstones, read ``value.format=binary`` and decode with ``from_json``.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from firesteel.core.spi import ConfigError, MissingDependencyError

_DDL_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "varchar": pa.string(),
    "boolean": pa.bool_(),
    "tinyint": pa.int8(),
    "byte": pa.int8(),
    "smallint": pa.int16(),
    "short": pa.int16(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)", re.IGNORECASE)

_AVRO_PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}


def schema_text(inline: str | None, path: str | None, option: str) -> str:
    """The schema from ``<option>`` or the file named by ``<option>.file``."""
    if inline:
        return inline
    if path:
        try:
            return Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            msg = f"option '{option}.file': cannot read {path}: {exc}"
            raise ConfigError(msg) from exc
    msg = f"option '{option}' or '{option}.file' is required"
    raise ConfigError(msg)


def json_value_schema(text: str) -> pa.Schema:
    """An Arrow schema from Spark's JSON schema format or a flat DDL string."""
    stripped = text.strip()
    if stripped.startswith("{"):
        from pyspark.sql.pandas.types import to_arrow_schema
        from pyspark.sql.types import StructType

        try:
            # Spark's TimestampType is an instant: UTC, as the DDL "timestamp" above.
            return to_arrow_schema(StructType.fromJson(json.loads(stripped)), timezone="UTC")
        except (ValueError, KeyError, TypeError) as exc:
            msg = f"option 'value.schema': not a Spark JSON schema: {exc}"
            raise ConfigError(msg) from exc
    fields = []
    for part in (p.strip() for p in re.split(r",(?![^(]*\))", stripped) if p.strip()):
        pieces = part.split(None, 1)
        if len(pieces) != 2:
            msg = f"option 'value.schema': expected 'name TYPE', got {part!r}"
            raise ConfigError(msg)
        name, type_text = pieces[0].strip("`"), pieces[1].strip()
        decimal = _DECIMAL.fullmatch(type_text)
        if decimal:
            dtype: pa.DataType = pa.decimal128(int(decimal[1]), int(decimal[2]))
        elif type_text.lower() in _DDL_TYPES:
            dtype = _DDL_TYPES[type_text.lower()]
        else:
            valid = ", ".join(sorted(_DDL_TYPES))
            msg = (
                f"option 'value.schema': unsupported type {type_text!r} for {name!r} "
                f"(DDL supports {valid}, DECIMAL(p,s); use Spark's JSON schema for nested types)"
            )
            raise ConfigError(msg)
        fields.append(pa.field(name, dtype))
    return pa.schema(fields)


def _avro_type(node: Any, names: dict[str, pa.DataType]) -> tuple[pa.DataType, bool]:
    """Arrow type and nullability of an Avro schema node."""
    if isinstance(node, list):
        members = [m for m in node if m != "null"]
        if len(members) != 1:
            msg = f"Avro unions other than [null, T] are not supported: {node}"
            raise ConfigError(msg)
        return _avro_type(members[0], names)[0], True
    if isinstance(node, str):
        if node in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[node], False
        if node in names:
            return names[node], False
        msg = f"unknown Avro type {node!r}"
        raise ConfigError(msg)
    kind = node.get("type")
    logical = node.get("logicalType")
    if logical == "timestamp-millis":
        return pa.timestamp("ms", tz="UTC"), False
    if logical == "timestamp-micros":
        return pa.timestamp("us", tz="UTC"), False
    if logical == "date":
        return pa.date32(), False
    if kind == "record":
        fields = []
        for f in node["fields"]:
            dtype, nullable = _avro_type(f["type"], names)
            fields.append(pa.field(f["name"], dtype, nullable=nullable))
        struct = pa.struct(fields)
        names[node["name"]] = struct
        return struct, False
    if kind == "array":
        return pa.list_(_avro_type(node["items"], names)[0]), False
    if kind == "map":
        return pa.map_(pa.string(), _avro_type(node["values"], names)[0]), False
    if kind == "enum":
        return pa.string(), False
    if kind == "fixed":
        return pa.binary(), False
    return _avro_type(kind, names)


def _fastavro() -> Any:
    try:
        import fastavro
    except ModuleNotFoundError as exc:
        package, distribution = "fastavro", "firesteel-kafka[avro]"
        raise MissingDependencyError(package, distribution) from exc
    return fastavro


def parse_avro_schema(text: str) -> tuple[dict[str, Any], pa.Schema]:
    """The parsed Avro record schema and the Arrow schema of its fields."""
    fastavro = _fastavro()
    try:
        raw = json.loads(text)
        parsed = fastavro.parse_schema(raw)
    except (ValueError, fastavro.schema.SchemaParseException) as exc:
        msg = f"option 'value.schema': not a valid Avro schema: {exc}"
        raise ConfigError(msg) from exc
    struct, _ = _avro_type(raw, {})
    if not isinstance(struct, pa.StructType):
        msg = "option 'value.schema': the Avro schema must be a record"
        raise ConfigError(msg)
    return parsed, pa.schema(list(struct))


@dataclass(frozen=True)
class Decoded:
    """Decoded rows (in input order, bad ones left out) and the indices of bad inputs, in
    input order, each with the reason."""

    table: pa.Table
    bad: list[tuple[int, str]]


class _Undecodable(Exception):
    """A value that holds no row of the value schema; the message says why."""


_JSON_WHITESPACE = b" \t\r\n"
_JSON_TOMBSTONE = "null value (a tombstone): value.format=json decodes JSON objects only"
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError)
"""What pyarrow raises for Python values its column types cannot hold."""


class ValueDecoder:
    """Decodes value bytes into the columns of :attr:`schema` (see the module docs for what
    is a row). Picklable."""

    def __init__(self, value_format: str, schema_source: str) -> None:
        self.format = value_format
        self.source = schema_source
        if value_format == "json":
            self.schema = json_value_schema(schema_source)
            self.avro: dict[str, Any] | None = None
        else:
            self.avro, self.schema = parse_avro_schema(schema_source)
        self.tombstone = self._tombstone_reason()
        """Why a null value is bad; ``None`` where it decodes to a row of nulls."""

    def _tombstone_reason(self) -> str | None:
        if self.format == "json":
            return _JSON_TOMBSTONE
        strict = [f.name for f in self.schema if not f.nullable]
        if not strict:
            return None
        return (
            f"null value (a tombstone), but value.schema's fields {', '.join(strict)} are not "
            'nullable (a union with "null")'
        )

    def decode(self, values: Sequence[bytes | None]) -> Decoded:
        """Decode ``values``; bad ones are left out of the table and listed with the reason."""
        if self.format == "json":
            return self._decode_json(values)
        return self._decode_avro(values)

    def _json_block(self, values: Sequence[bytes]) -> pa.Table:
        from pyarrow import json as pajson

        body = b"\n".join(values)
        return pajson.read_json(
            io.BytesIO(body),
            read_options=pajson.ReadOptions(use_threads=False, block_size=max(len(body), 1 << 20)),
            parse_options=pajson.ParseOptions(
                explicit_schema=self.schema,
                unexpected_field_behavior="ignore",
                newlines_in_values=True,
            ),
        )

    @staticmethod
    def _not_an_object(value: bytes) -> str | None:
        """Why ``value`` is no JSON object, if it is none."""
        head = value.lstrip(_JSON_WHITESPACE)
        if head.startswith(b"{"):
            return None
        if head.rstrip(_JSON_WHITESPACE) == b"null":
            return "a JSON null, not an object of value.schema"
        return f"not a JSON object (starts {head[:20]!r})"

    def _decode_json(self, values: Sequence[bytes | None]) -> Decoded:
        bad: list[tuple[int, str]] = []
        objects: list[tuple[int, bytes]] = []
        for index, value in enumerate(values):
            reason = _JSON_TOMBSTONE if value is None else self._not_an_object(value)
            if reason is not None:
                bad.append((index, reason))
            elif value is not None:
                objects.append((index, value))
        if not objects:
            return Decoded(self.schema.empty_table(), bad)
        try:
            table = self._json_block([v for _, v in objects])
            if table.num_rows == len(objects):
                return Decoded(table, bad)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass
        good = []
        for index, value in objects:
            try:
                row = self._json_block([value])
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                bad.append((index, f"not JSON matching value.schema: {exc}"))
                continue
            if row.num_rows != 1:
                bad.append((index, f"expected one JSON object, found {row.num_rows}"))
                continue
            good.append(row)
        table = pa.concat_tables(good) if good else self.schema.empty_table()
        return Decoded(table, sorted(bad))

    def _avro_record(self, value: bytes | None) -> dict[str, Any]:
        """The row ``value`` holds; :class:`_Undecodable` if it holds none."""
        fastavro = _fastavro()
        from fastavro.validation import ValidationError, validate

        assert self.avro is not None
        if value is None:
            if self.tombstone is not None:
                raise _Undecodable(self.tombstone)
            return {}
        stream = io.BytesIO(value)
        try:
            record = fastavro.schemaless_reader(stream, self.avro, None)
            validate(record, self.avro, raise_errors=True)
        except ValidationError as exc:
            reason = f"not a record of value.schema: {'; '.join(map(str, exc.errors))}"
            raise _Undecodable(reason) from exc
        except (ValueError, EOFError, TypeError, IndexError, KeyError, OverflowError) as exc:
            reason = f"not Avro written with value.schema: {exc!r}"
            raise _Undecodable(reason) from exc
        left = len(value) - stream.tell()
        if left:
            reason = (
                f"not Avro written with value.schema: {left} bytes after the record, which "
                f"ends at byte {stream.tell()} of {len(value)}"
            )
            raise _Undecodable(reason)
        return dict(record)

    def _decode_avro(self, values: Sequence[bytes | None]) -> Decoded:
        rows: list[dict[str, Any]] = []
        kept: list[int] = []
        bad: list[tuple[int, str]] = []
        for index, value in enumerate(values):
            try:
                rows.append(self._avro_record(value))
            except _Undecodable as exc:
                bad.append((index, str(exc)))
                continue
            kept.append(index)
        try:
            return Decoded(pa.Table.from_pylist(rows, schema=self.schema), bad)
        except _ARROW_ERRORS:
            pass
        # A record fastavro accepts that Arrow cannot hold (e.g. a decimal the column
        # mapping does not cover): find it rather than fail the whole chunk.
        good = []
        for index, row in zip(kept, rows, strict=True):
            try:
                good.append(pa.Table.from_pylist([row], schema=self.schema))
            except _ARROW_ERRORS as exc:
                bad.append((index, f"a record of value.schema that its columns cannot hold: {exc}"))
        table = pa.concat_tables(good) if good else self.schema.empty_table()
        return Decoded(table, sorted(bad))


class ValueEncoder:
    """Encodes the non-Kafka columns of a batch into value bytes (JSON or Avro)."""

    def __init__(self, value_format: str, avro_schema: str | None = None) -> None:
        self.format = value_format
        self.avro = parse_avro_schema(avro_schema)[0] if avro_schema else None

    def encode(self, batch: pa.RecordBatch) -> list[bytes]:
        """One value per row of ``batch``."""
        rows = batch.to_pylist()
        if self.format == "json":
            return [json.dumps(row, default=str, separators=(",", ":")).encode() for row in rows]
        fastavro = _fastavro()
        out = []
        for row in rows:
            buffer = io.BytesIO()
            fastavro.schemaless_writer(buffer, self.avro, row)
            out.append(buffer.getvalue())
        return out
