"""Value decoding (source) and encoding (sink): raw bytes, JSON or Avro.

JSON decodes a whole consume() chunk at once with pyarrow's JSON reader and
falls back to one record at a time only to find the records that fail, so a
clean chunk never becomes Python objects. Avro uses fastavro (schemaless
records, schema inline or from a file).
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

from firesteel.core.errors import ConfigError, MissingDependencyError

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
            return to_arrow_schema(StructType.fromJson(json.loads(stripped)))
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
    """Decoded rows (in input order, bad ones left out) and the indices of bad inputs."""

    table: pa.Table
    bad: list[tuple[int, str]]


class ValueDecoder:
    """Decodes value bytes into the columns of :attr:`schema`. Picklable."""

    def __init__(self, value_format: str, schema_source: str) -> None:
        self.format = value_format
        self.source = schema_source
        if value_format == "json":
            self.schema = json_value_schema(schema_source)
            self.avro: dict[str, Any] | None = None
        else:
            self.avro, self.schema = parse_avro_schema(schema_source)

    def decode(self, values: Sequence[bytes | None]) -> Decoded:
        """Decode ``values``; a tombstone (``None``) decodes to a row of nulls."""
        if self.format == "json":
            return self._decode_json(values)
        return self._decode_avro(values)

    def _json_block(self, values: Sequence[bytes | None]) -> pa.Table:
        from pyarrow import json as pajson

        body = b"\n".join(b"{}" if v is None else v for v in values)
        return pajson.read_json(
            io.BytesIO(body),
            read_options=pajson.ReadOptions(use_threads=False, block_size=max(len(body), 1 << 20)),
            parse_options=pajson.ParseOptions(
                explicit_schema=self.schema,
                unexpected_field_behavior="ignore",
                newlines_in_values=True,
            ),
        )

    def _decode_json(self, values: Sequence[bytes | None]) -> Decoded:
        if not values:
            return Decoded(self.schema.empty_table(), [])
        try:
            table = self._json_block(values)
            if table.num_rows == len(values):
                return Decoded(table, [])
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass
        good, bad = [], []
        for index, value in enumerate(values):
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
        return Decoded(table, bad)

    def _decode_avro(self, values: Sequence[bytes | None]) -> Decoded:
        fastavro = _fastavro()
        rows: list[dict[str, Any]] = []
        bad: list[tuple[int, str]] = []
        for index, value in enumerate(values):
            if value is None:
                rows.append({})
                continue
            try:
                rows.append(fastavro.schemaless_reader(io.BytesIO(value), self.avro, None))
            except (ValueError, EOFError, TypeError, IndexError, UnicodeDecodeError) as exc:
                bad.append((index, f"not Avro matching value.schema: {exc!r}"))
        return Decoded(pa.Table.from_pylist(rows, schema=self.schema), bad)


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
