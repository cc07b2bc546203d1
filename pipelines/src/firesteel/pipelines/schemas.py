"""A port's records as a Spark schema: the Avro description of every codec, in Spark types.

Local topics store records as Parquet columns of this schema, and an inlet
reads them with it, so no schema is ever inferred from data.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import types as T

from firesteel.pipelines.errors import ConfigurationError

_PRIMITIVES: dict[str, T.DataType] = {
    "string": T.StringType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
    "float": T.FloatType(),
    "double": T.DoubleType(),
    "boolean": T.BooleanType(),
    "bytes": T.BinaryType(),
}
_LOGICAL: dict[str, T.DataType] = {
    "date": T.DateType(),
    "timestamp-millis": T.TimestampType(),
    "timestamp-micros": T.TimestampType(),
}


def spark_schema(avro: dict[str, Any]) -> T.StructType:
    """The Spark ``StructType`` of an Avro record schema."""
    data_type, _nullable = _convert(avro)
    if not isinstance(data_type, T.StructType):
        msg = f"a port's schema must be an Avro record, got {avro.get('type')!r}"
        raise ConfigurationError(msg)
    return data_type


def _convert(avro: Any) -> tuple[T.DataType, bool]:
    """The Spark type of an Avro type, and whether it admits null."""
    if isinstance(avro, list):
        branches = [branch for branch in avro if branch != "null"]
        if len(branches) != 1:
            msg = f"Avro union {avro!r}: only [null, T] unions have a Spark type"
            raise ConfigurationError(msg)
        return _convert(branches[0])[0], True
    if isinstance(avro, str):
        if avro in _PRIMITIVES:
            return _PRIMITIVES[avro], False
        msg = f"Avro type {avro!r} has no Spark type here (named types must be inline)"
        raise ConfigurationError(msg)
    logical = avro.get("logicalType")
    if logical in _LOGICAL:
        return _LOGICAL[logical], False
    if logical == "decimal":
        return T.DecimalType(int(avro["precision"]), int(avro.get("scale", 0))), False
    kind = avro.get("type")
    if kind == "record":
        fields = []
        for field in avro["fields"]:
            data_type, nullable = _convert(field["type"])
            fields.append(T.StructField(field["name"], data_type, nullable))
        return T.StructType(fields), False
    if kind == "array":
        element, nullable = _convert(avro["items"])
        return T.ArrayType(element, nullable), False
    if kind == "map":
        value, nullable = _convert(avro["values"])
        return T.MapType(T.StringType(), value, nullable), False
    if kind == "enum":
        return T.StringType(), False
    if kind == "fixed":
        return T.BinaryType(), False
    return _convert(kind)
