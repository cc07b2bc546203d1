"""State schema evolution: the Avro schema of a state's values, recorded with every snapshot.

Every snapshot (heap/filesystem header, RocksDB manifest) records, per state,
the Avro schema of the values it wrote (:func:`value_schema`, derived from the
descriptor's ``type``). A restore compares it with the schema the descriptor
declares now and, when they differ, applies Avro's reader/writer schema
resolution to every stored value: the rules are Avro's, not firesteel's
(``avro``'s :class:`~avro.compatibility.ReaderWriterCompatibilityChecker`
decides, before any state is read; ``fastavro`` converts the values).

What a type becomes (anything else is *opaque*: recorded by name, restorable
only unchanged):

==============================  ==========================================
Python type                     Avro schema
==============================  ==========================================
``bool``                        ``boolean``
``int`` / ``numpy.int64``       ``long``
``numpy.int32``                 ``int``
``float`` / ``numpy.float64``   ``double``
``numpy.float32``               ``float``
``str`` / ``bytes``             ``string`` / ``bytes``
``X | None``                    ``["null", X]`` (``[X, "null"]`` with a default)
``list[X]``                     ``{"type": "array", "items": X}``
``dict[str, X]``                ``{"type": "map", "values": X}``
a dataclass                     a record named after the class, one field per
                                dataclass field, its default the field's default
==============================  ==========================================

A field renamed is given by the descriptor's ``renames`` (old name -> new name),
which become Avro aliases of the new field (or of the record, for a renamed
dataclass). Only :class:`~firesteel.state.serializers.MsgpackSerializer` states
evolve; a state with another serializer (pickle) restores only unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import logging
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from firesteel.core.spi import ConfigError
from firesteel.state.serializers import MsgpackSerializer, Serializer, unpack

logger = logging.getLogger(__name__)

OPAQUE = "firesteel.opaque"
"""The key of the schema recorded for a type with no Avro form: ``{OPAQUE: "module.Name"}``."""

_PRIMITIVES: dict[str, str] = {
    "bool": "boolean",
    "int": "long",
    "int64": "long",
    "int32": "int",
    "float": "double",
    "float64": "double",
    "float32": "float",
    "str": "string",
    "bytes": "bytes",
}
"""Python (and numpy scalar) type names -> Avro primitive types."""


class _Opaque(Exception):
    """A type without an Avro form (internal: becomes an opaque schema)."""


def _primitive(python_type: type) -> str | None:
    if python_type.__module__ not in ("builtins", "numpy"):
        return None
    return _PRIMITIVES.get(python_type.__name__)


def _plain_default(value: Any) -> Any:
    """A field default in Avro's JSON form."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain_default(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, list | tuple):
        return [_plain_default(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain_default(v) for k, v in value.items()}
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def _missing(value: Any) -> bool:
    """Whether a dataclass field's default is ``dataclasses.MISSING``: by type, since a
    dataclass cloudpickle shipped by value to a Spark worker carries a copy of the sentinel."""
    return isinstance(value, type(dataclasses.MISSING))


class _Builder:
    def __init__(self, renames: Mapping[str, str]) -> None:
        self.aliases: dict[str, list[str]] = {}
        for old, new in renames.items():
            self.aliases.setdefault(new, []).append(old)
        self.named: set[str] = set()

    def schema(self, python_type: Any) -> Any:
        if isinstance(python_type, type):
            primitive = _primitive(python_type)
            if primitive is not None:
                return primitive
            if dataclasses.is_dataclass(python_type):
                return self.record(python_type)
        origin = typing.get_origin(python_type)
        args = typing.get_args(python_type)
        if origin in (typing.Union, types.UnionType) and type(None) in args:
            rest = [a for a in args if a is not type(None)]
            if len(rest) == 1:
                return ["null", self.schema(rest[0])]
        if origin is list and len(args) == 1:
            return {"type": "array", "items": self.schema(args[0])}
        if origin is dict and len(args) == 2 and args[0] is str:
            return {"type": "map", "values": self.schema(args[1])}
        raise _Opaque(getattr(python_type, "__qualname__", repr(python_type)))

    def record(self, cls: type) -> Any:
        name = cls.__name__
        if name in self.named:
            return name
        self.named.add(name)
        try:
            hints = typing.get_type_hints(cls)
        except NameError as exc:
            _unresolved(f"{cls.__module__}.{cls.__qualname__}", str(exc))
            raise _Opaque(cls.__qualname__) from exc
        fields = []
        for item in dataclasses.fields(cls):
            schema = self.schema(hints[item.name])
            entry: dict[str, Any] = {"name": item.name, "type": schema}
            default: Any = dataclasses.MISSING
            factory: Any = item.default_factory
            if not _missing(item.default):
                default = item.default
            elif not _missing(factory):
                default = factory()
            if not _missing(default):
                if isinstance(schema, list) and default is not None:
                    # Avro takes a union's default from its first branch.
                    entry["type"] = [*schema[1:], "null"]
                entry["default"] = _plain_default(default)
            if item.name in self.aliases:
                entry["aliases"] = sorted(self.aliases[item.name])
            fields.append(entry)
        record: dict[str, Any] = {"type": "record", "name": name, "fields": fields}
        if name in self.aliases:
            record["aliases"] = sorted(self.aliases[name])
        return record


@functools.cache
def _unresolved(name: str, error: str) -> None:
    """Say once per process why a dataclass state is opaque: its string annotations
    (``from __future__ import annotations``) name something this process lacks. A class
    of the job's ``__main__`` reaches Spark's workers by value, without its module's
    imports, so ``dt.datetime`` cannot be resolved there."""
    logger.warning(
        "state type %s: its annotations cannot be resolved in this process (%s); its state "
        "is recorded as opaque and restores only unchanged (no schema evolution). Define "
        "the class in a module the workers can import, not the job's __main__, to let it "
        "evolve",
        name,
        error,
    )


def value_schema(python_type: type | None, renames: Mapping[str, str] | None = None) -> Any:
    """The Avro schema of values of ``python_type`` (None for an untyped state), with
    ``renames`` (old name -> new name, of fields or dataclasses) as aliases; a type with no
    Avro form gives ``{OPAQUE: "<module>.<qualname>"}``."""
    if python_type is None:
        return None
    try:
        return _Builder(renames or {}).schema(python_type)
    except _Opaque:
        module = getattr(python_type, "__module__", "")
        return {OPAQUE: f"{module}.{getattr(python_type, '__qualname__', repr(python_type))}"}


def recorded(schema: Any) -> str:
    """The form a schema is stored in beside a state: canonical JSON (``null`` when untyped)."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


def _shape(schema: Any) -> Any:
    """A schema minus aliases and defaults: two schemas differing only there read the same
    stored values alike."""
    if isinstance(schema, dict):
        return {k: _shape(v) for k, v in schema.items() if k not in ("aliases", "default")}
    if isinstance(schema, list):
        return [_shape(v) for v in schema]
    return schema


def _describe(schema: Any) -> str:
    if isinstance(schema, dict) and OPAQUE in schema:
        return f"{schema[OPAQUE]} (no Avro form)"
    return "untyped" if schema is None else json.dumps(schema)


def _is_avro(schema: Any) -> bool:
    return schema is not None and not (isinstance(schema, dict) and OPAQUE in schema)


Loader = Callable[[bytes], Any]
"""Decodes one stored value into the declared type."""


@dataclasses.dataclass(frozen=True)
class StateUpgrade:
    """How the values one snapshot stored for a state become values of its declared type."""

    state: str
    writer: Any
    reader: Any
    serializer: Serializer

    def loads(self, data: bytes) -> Any:
        """Decode a value the writer stored and resolve it to the reader's schema."""
        import fastavro

        buffer = io.BytesIO()
        try:
            fastavro.schemaless_writer(buffer, self._parsed[0], unpack(data))
        except (TypeError, ValueError, AttributeError) as exc:
            msg = (
                f"state '{self.state}': a stored value does not match the schema recorded "
                f"with it ({_describe(self.writer)}): {exc}"
            )
            raise ConfigError(msg) from exc
        buffer.seek(0)
        resolved = fastavro.schemaless_reader(buffer, self._parsed[0], self._parsed[1])
        serializer = self.serializer
        assert isinstance(serializer, MsgpackSerializer)
        return serializer.build(resolved)

    @functools.cached_property
    def _parsed(self) -> tuple[Any, Any]:
        """The writer's and reader's schemas parsed by fastavro (once per upgrade)."""
        import fastavro

        return fastavro.parse_schema(self.writer), fastavro.parse_schema(self.reader)


def _incompatibility(reader: Any, writer: Any) -> str | None:
    """Why Avro cannot read ``writer``'s values as ``reader`` (None when it can)."""
    import avro.errors
    import avro.schema
    from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

    try:
        result = ReaderWriterCompatibilityChecker().get_compatibility(
            avro.schema.parse(json.dumps(reader)), avro.schema.parse(json.dumps(writer))
        )
    except avro.errors.AvroException as exc:
        return f"the schema is not valid Avro: {exc}"
    if result.compatibility is SchemaCompatibilityType.compatible:
        return None
    where = ", ".join(sorted(result.locations))
    return f"{'; '.join(sorted(result.messages))} (at {where})"


def unchanged(stored: str | None, declared: Any) -> bool:
    """True when values recorded with schema ``stored`` (JSON; None when written before
    schemas were recorded) load into the ``declared`` schema as they are."""
    if stored is None:
        return True
    writer = json.loads(stored)
    # A state gaining or losing its type: untyped values were never checked against one,
    # and an untyped state takes whatever is stored, so values load as they are.
    return _shape(writer) == _shape(declared) or writer is None or declared is None


def upgrade(
    operator: str,
    state: str,
    stored: str | None,
    *,
    declared: Any,
    serializer: Serializer,
    where: str,
) -> StateUpgrade | None:
    """How to restore ``state`` whose snapshot at ``where`` recorded schema ``stored`` (JSON,
    None when written before schemas were recorded) into the ``declared`` schema: None when
    the values load as they are, else a :class:`StateUpgrade`. Raises ``ConfigError`` naming
    the state, both types and the fix when they cannot be resolved (before any value is read).
    """
    if stored is None or unchanged(stored, declared):
        return None
    writer = json.loads(stored)
    fix = (
        "declare the old type again; or make the change one Avro resolves (add a field with a "
        "default, remove a field, widen int -> float or int32 -> int64, rename a field with "
        "renames={'old': 'new'} on the descriptor); or call "
        f"ctx.drop_state('{state}') in open() and declare the new type under a new name"
    )
    prefix = (
        f"operator '{operator}': state '{state}' in {where} was written as "
        f"{_describe(writer)} but is declared as {_describe(declared)}"
    )
    if not isinstance(serializer, MsgpackSerializer):
        msg = (
            f"{prefix}; its serializer '{serializer.name}' cannot evolve (only msgpack state "
            f"does). Fix: {fix}"
        )
        raise ConfigError(msg)
    if not (_is_avro(writer) and _is_avro(declared)):
        msg = f"{prefix}; a type with no Avro form cannot evolve. Fix: {fix}"
        raise ConfigError(msg)
    why = _incompatibility(declared, writer)
    if why is not None:
        msg = f"{prefix}; Avro cannot resolve the change: {why}. Fix: {fix}"
        raise ConfigError(msg)
    logger.info("state: operator %s state %s evolves from %s", operator, state, stored)
    return StateUpgrade(state, writer, declared, serializer)
