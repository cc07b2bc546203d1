"""Inlets and outlets: a streamlet's named, typed ports.

Every port carries a codec saying how its records are encoded on the topic it
is bound to: :class:`AvroCodec` (Avro binary, schema as an ``.avsc`` file or a
dict) or :class:`JsonCodec` (JSON text, schema as a Spark ``StructType``). Both
describe their records as an Avro schema, so a blueprint checks every producer
and consumer pair on a topic by Avro's reader/writer rules, whatever the codec.
An outlet may name its records' key (a column), which partitions the topic,
and a partitioner (:mod:`firesteel.pipelines.partitioners`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from firesteel.pipelines.errors import ConfigurationError
from firesteel.pipelines.partitioners import Partitioner, reference

PORT_NAME = re.compile(r"^[a-z][a-z0-9-]*$")
"""Port names, as Cloudflow's: lowercase letters, digits and '-', starting with a letter."""


@dataclass(frozen=True)
class AvroCodec:
    """Avro binary records of one schema (``.avsc`` path or the schema as a dict)."""

    schema: Mapping[str, Any] | str | Path
    format: str = field(default="avro", init=False)

    def avro_schema(self) -> dict[str, Any]:
        """The schema as a JSON dict (read from the file when given a path)."""
        if isinstance(self.schema, Mapping):
            return dict(self.schema)
        path = Path(self.schema)
        try:
            loaded = json.loads(path.read_text())
        except OSError as exc:
            msg = f"Avro schema file {path}: cannot read it ({exc.strerror})"
            raise ConfigurationError(msg) from None
        except ValueError as exc:
            msg = f"Avro schema file {path}: not JSON ({exc})"
            raise ConfigurationError(msg) from None
        if not isinstance(loaded, dict):
            msg = f"Avro schema file {path}: expected a record schema (a JSON object)"
            raise ConfigurationError(msg)
        return loaded


@dataclass(frozen=True)
class JsonCodec:
    """JSON text records of a Spark ``StructType`` (built in Python: no JVM needed)."""

    schema: Any
    """A ``pyspark.sql.types.StructType``."""
    name: str = "Record"
    """The record name of its Avro description."""
    format: str = field(default="json", init=False)

    def avro_schema(self) -> dict[str, Any]:
        """The Avro record schema that describes these JSON records."""
        return _struct_to_avro(self.schema, self.name)


_SPARK_TO_AVRO = {
    "boolean": "boolean",
    "byte": "int",
    "short": "int",
    "integer": "int",
    "long": "long",
    "float": "float",
    "double": "double",
    "string": "string",
    "binary": "bytes",
    "date": {"type": "int", "logicalType": "date"},
    "timestamp": {"type": "long", "logicalType": "timestamp-micros"},
}


def _struct_to_avro(struct: Any, name: str) -> dict[str, Any]:
    fields = []
    for spark_field in struct.fields:
        kind = _type_to_avro(spark_field.dataType, f"{name}_{spark_field.name}")
        if spark_field.nullable:
            fields.append({"name": spark_field.name, "type": ["null", kind], "default": None})
        else:
            fields.append({"name": spark_field.name, "type": kind})
    return {"type": "record", "name": name, "fields": fields}


def _type_to_avro(data_type: Any, name: str) -> Any:
    type_name = data_type.typeName()
    if type_name in _SPARK_TO_AVRO:
        return _SPARK_TO_AVRO[type_name]
    if type_name == "struct":
        return _struct_to_avro(data_type, name)
    if type_name == "array":
        return {"type": "array", "items": _type_to_avro(data_type.elementType, name)}
    if type_name == "map":
        return {"type": "map", "values": _type_to_avro(data_type.valueType, name)}
    if type_name == "decimal":
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": data_type.precision,
            "scale": data_type.scale,
        }
    msg = f"JSON port schema: Spark type {data_type.simpleString()!r} has no Avro description"
    raise ConfigurationError(msg)


Codec = AvroCodec | JsonCodec


@dataclass(frozen=True)
class StreamletPort:
    """A named end of a streamlet, whose ``codec`` reads or writes its topic's records."""

    name: str
    codec: Codec


@dataclass(frozen=True)
class Inlet(StreamletPort):
    """A named input of a streamlet, read from the topic the blueprint binds it to."""


@dataclass(frozen=True)
class Outlet(StreamletPort):
    """A named output of a streamlet; ``key`` (a column) is its records' key, which partitions
    a Kafka topic by default; ``partitioner`` (``(key, partitions) -> partition``, e.g.
    :func:`~firesteel.pipelines.partitioners.round_robin`) chooses the partition instead."""

    key: str | None = None
    partitioner: Partitioner | None = None

    def __post_init__(self) -> None:
        if self.partitioner is not None:
            try:
                reference(self.partitioner)
            except ValueError as exc:
                msg = f"outlet {self.name!r}: {exc}"
                raise ConfigurationError(msg) from None

    @property
    def partitioner_reference(self) -> str | None:
        """``module:function`` of its partitioner, for the Kafka sink; None without one."""
        return None if self.partitioner is None else reference(self.partitioner)


@dataclass(frozen=True)
class StreamletShape:
    """A streamlet's ports: inlets and outlets, names unique across both."""

    inlets: Sequence[Inlet] = ()
    outlets: Sequence[Outlet] = ()

    def __post_init__(self) -> None:
        names = [inlet.name for inlet in self.inlets] + [out.name for out in self.outlets]
        for port_name in names:
            if not PORT_NAME.match(port_name):
                msg = (
                    f"port {port_name!r}: use lowercase letters, digits and '-', starting with "
                    "a letter (e.g. 'in', 'valid-readings')"
                )
                raise ConfigurationError(msg)
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            msg = f"ports {duplicates}: each port name may appear once among inlets and outlets"
            raise ConfigurationError(msg)

    def inlet(self, name: str) -> Inlet | None:
        """The inlet called ``name``, if any."""
        return next((port for port in self.inlets if port.name == name), None)

    def outlet(self, name: str) -> Outlet | None:
        """The outlet called ``name``, if any."""
        return next((port for port in self.outlets if port.name == name), None)
