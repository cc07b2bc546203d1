"""Typed connector options parsed from Spark's flat, case-insensitive string options.

A connector declares its options as a frozen dataclass whose fields use
:func:`option`; :func:`parse_options` turns the strings Spark hands over into
that dataclass, converting types, checking ``Literal`` choices, and refusing
unknown or misspelled keys with the list of valid ones and the closest match.
A field declared with ``min=`` / ``max=`` is range-checked by :func:`check_ranges`,
which the dataclass's ``__post_init__`` calls, so options built directly in Python
are checked as strictly as parsed ones.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import re
import types
import typing
from collections.abc import Collection, Mapping
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

from firesteel.core.errors import ConfigError
from firesteel.core.guarantee import Guarantee

T = TypeVar("T")

SPARK_MANAGED_KEYS = frozenset({"checkpointlocation", "queryname"})
"""Keys Spark itself adds to a sink's options; accepted and ignored unless declared."""

SECRET_MARKERS = frozenset(
    {"password", "passwd", "secret", "token", "key", "private", "jaas", "sas", "credential"}
)
"""Words of a setting's name (split at ``.``, ``_``, ``-``) that mark its value secret."""


def option(
    default: Any = dataclasses.MISSING,
    *,
    doc: str,
    name: str | None = None,
    required: bool = False,
    min: float | None = None,
    max: float | None = None,
) -> Any:
    """Declare a connector option field.

    ``name`` is the spelling users type (default: the field name with ``_`` → ``.``);
    ``doc`` is shown by :func:`describe_options` and in error messages; ``min`` and
    ``max`` bound a number inclusively (checked by :func:`check_ranges`; None, "not set",
    is always allowed).
    """
    metadata = {"doc": doc, "name": name, "required": required, "min": min, "max": max}
    if required:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def option_name(field: dataclasses.Field[Any]) -> str:
    """The user-facing spelling of an option field."""
    return str(field.metadata.get("name") or field.name.replace("_", "."))


def check_ranges(options: Any, where: str = "") -> None:
    """Refuse any field of the dataclass ``options`` outside its ``option(min=, max=)`` bounds.

    Called by an options dataclass's ``__post_init__``; ``where`` (e.g. the connector's
    name) starts the message.
    """
    prefix = f"{where}: " if where else ""
    for field in dataclasses.fields(options):
        low, high = field.metadata.get("min"), field.metadata.get("max")
        value = getattr(options, field.name)
        if (low is None and high is None) or value is None:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if number and (low is None or value >= low) and (high is None or value <= high):
            continue
        if high is None:
            bound = f"at least {low}"
        elif low is None:
            bound = f"at most {high}"
        else:
            bound = f"between {low} and {high}"
        msg = f"{prefix}option '{option_name(field)}' is {value!r}; it must be {bound}"
        raise ConfigError(msg)


def is_secret(key: str, loggable: Collection[str] | None = None) -> bool:
    """Whether the value of setting ``key`` must never be logged or echoed in an error.

    The one rule for every option, storage setting and client property: a key
    with a word of :data:`SECRET_MARKERS` is secret. A client whose secret
    properties have open-ended names (librdkafka's ``sasl.oauthbearer.extensions``,
    or a misspelled ``sasl.pasword``) passes its allow-list of property names
    known to be safe as ``loggable``: every other key is secret too (fails closed).
    """
    lowered = key.lower()
    if loggable is not None and lowered not in loggable:
        return True
    return not SECRET_MARKERS.isdisjoint(re.split(r"[._-]", lowered))


def _convert(key: str, text: str, annotation: Any) -> Any:
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        # "none" is a value of its own for a guarantee (at-most-once), never "not set".
        blanks = ("", "null") if members[0] is Guarantee else ("", "none", "null")
        if text.strip().lower() in blanks and len(members) < len(get_args(annotation)):
            return None
        return _convert(key, text, members[0])
    if origin is Literal:
        choices = [str(c) for c in get_args(annotation)]
        value = text.strip().lower()
        if value not in choices:
            msg = f"option '{key}': {text!r} is not one of {', '.join(choices)}"
            raise ConfigError(msg)
        return value
    if annotation is bool:
        value = text.strip().lower()
        if value not in ("true", "false"):
            msg = f"option '{key}': expected true or false, got {text!r}"
            raise ConfigError(msg)
        return value == "true"
    if annotation in (int, float):
        try:
            return annotation(text.strip())
        except ValueError as exc:
            shown = "<redacted>" if is_secret(key) else repr(text)
            msg = f"option '{key}': expected {annotation.__name__}, got {shown}"
            raise ConfigError(msg) from exc
    if annotation is Guarantee:
        return Guarantee.parse(text, key)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        try:
            return annotation(text.strip().lower())
        except ValueError as exc:
            valid = ", ".join(str(m.value) for m in annotation)
            msg = f"option '{key}': {text!r} is not one of {valid}"
            raise ConfigError(msg) from exc
    return text


def parse_options(
    cls: type[T],
    raw: Mapping[str, str],
    *,
    passthrough_prefixes: tuple[str, ...] = (),
    connector: str = "",
) -> T:
    """Build ``cls`` (a dataclass of :func:`option` fields) from Spark's string options.

    Keys starting with one of ``passthrough_prefixes`` are collected into the
    field named ``passthrough`` (prefix kept), e.g. ``kafka.*`` for librdkafka.
    """
    where = f"{connector}: " if connector else ""
    hints = get_type_hints(cls)
    fields = {option_name(f).lower(): f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    passthrough: dict[str, str] = {}
    for key, text in raw.items():
        lowered = key.lower()
        if lowered in fields:
            field = fields[lowered]
            values[field.name] = _convert(option_name(field), str(text), hints[field.name])
        elif passthrough_prefixes and lowered.startswith(passthrough_prefixes):
            passthrough[key] = str(text)
        elif lowered not in SPARK_MANAGED_KEYS:
            valid = sorted(option_name(f) for f in fields.values() if f.name != "passthrough")
            close = difflib.get_close_matches(lowered, [v.lower() for v in valid], n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            joined = "' / '".join(passthrough_prefixes)
            prefixes = f" (or any '{joined}*' key)" if passthrough_prefixes else ""
            msg = (
                f"{where}unknown option '{key}'.{hint} Valid options: {', '.join(valid)}{prefixes}"
            )
            raise ConfigError(msg)
    if "passthrough" in {f.name for f in fields.values()}:
        values["passthrough"] = passthrough
    for field in fields.values():
        if field.metadata.get("required") and field.name not in values:
            msg = f"{where}option '{option_name(field)}' is required: {field.metadata['doc']}"
            raise ConfigError(msg)
    try:
        return cls(**values)
    except ConfigError as exc:
        msg = f"{where}{exc}"
        raise ConfigError(msg) from exc


def describe_options(cls: type[Any]) -> str:
    """A plain-text table of a connector's options, for docs and ``--help``."""
    lines = []
    for field in dataclasses.fields(cls):
        if field.name == "passthrough":
            continue
        default = "required" if field.metadata.get("required") else repr(field.default)
        lines.append(f"{option_name(field):32} {default:16} {field.metadata['doc']}")
    return "\n".join(lines)


def require_absolute(key: str, value: str | None) -> None:
    """Refuse a relative path option.

    Spark runs Python workers in a scratch working directory of their own, so
    a relative path would name one folder on the driver and another in tasks.
    URIs (``s3://...``, ``file:///...``) are absolute by construction.
    """
    if value is None or "://" in value or value.startswith("/"):
        return
    msg = (
        f"option '{key}' must be an absolute path or a URI, got {value!r}: Spark runs "
        "Python workers in their own working directory, so relative paths differ "
        "between driver and tasks (use os.path.abspath)"
    )
    raise ConfigError(msg)
