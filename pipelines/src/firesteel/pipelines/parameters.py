"""Typed configuration parameters of a streamlet, as Cloudflow declared them.

A streamlet lists its parameters; the configuration model
(:mod:`firesteel.pipelines.config`) fills them from the blueprint,
configuration files and ``key=value`` arguments, and each parameter parses and
validates its raw value, naming the streamlet, the key and what was expected.
Durations and memory sizes use HOCON's units (``10s``, ``500 ms``, ``2 minutes``;
``512M``, ``1 GiB``, ``100k``).
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from firesteel.pipelines.errors import ConfigurationError

_KEY = re.compile(r"^[a-z][a-z0-9-]*$")

_DURATION_UNITS = {
    ("ns", "nano", "nanos", "nanosecond", "nanoseconds"): 1e-9,
    ("us", "micro", "micros", "microsecond", "microseconds"): 1e-6,
    ("ms", "milli", "millis", "millisecond", "milliseconds"): 1e-3,
    ("s", "second", "seconds"): 1.0,
    ("m", "minute", "minutes"): 60.0,
    ("h", "hour", "hours"): 3600.0,
    ("d", "day", "days"): 86400.0,
}
_SIZE_UNITS = {
    ("", "b", "byte", "bytes"): 1,
    ("k", "kb", "kilobyte", "kilobytes"): 1000,
    ("m", "mb", "megabyte", "megabytes"): 1000**2,
    ("g", "gb", "gigabyte", "gigabytes"): 1000**3,
    ("t", "tb", "terabyte", "terabytes"): 1000**4,
    ("ki", "kib", "kibibyte", "kibibytes"): 1024,
    ("mi", "mib", "mebibyte", "mebibytes"): 1024**2,
    ("gi", "gib", "gibibyte", "gibibytes"): 1024**3,
    ("ti", "tib", "tebibyte", "tebibytes"): 1024**4,
}
# HOCON reads a bare "k", "m", "g" as powers of 1024 (Typesafe Config), like the JVM flags.
_HOCON_SINGLE_LETTER = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_AMOUNT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_duration(raw: Any) -> datetime.timedelta:
    """A HOCON duration (``10s``, ``500 ms``, ``2 minutes``; a bare number is milliseconds)."""
    if isinstance(raw, datetime.timedelta):
        return raw
    if hasattr(raw, "normalized"):
        # pyhocon reads an unquoted ``10s`` as a dateutil relativedelta.
        base = datetime.datetime(2000, 1, 1)
        return (base + raw) - base
    if isinstance(raw, bool):
        msg = f"{raw!r} is not a duration"
        raise ValueError(msg)
    if isinstance(raw, int | float):
        return datetime.timedelta(milliseconds=raw)
    match = _AMOUNT.match(str(raw))
    if match:
        number, unit = float(match.group(1)), match.group(2).lower() or "ms"
        for names, seconds in _DURATION_UNITS.items():
            if unit in names:
                return datetime.timedelta(seconds=number * seconds)
    msg = f"{raw!r} is not a duration (e.g. 10s, 500 ms, 2 minutes)"
    raise ValueError(msg)


def parse_memory_size(raw: Any) -> int:
    """A HOCON memory size in bytes (``512M``, ``1 GiB``, ``100k``, ``42``)."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    match = _AMOUNT.match(str(raw))
    if match:
        number, unit = float(match.group(1)), match.group(2)
        lower = unit.lower()
        factor = _HOCON_SINGLE_LETTER.get(lower) if len(unit) == 1 else None
        if factor is None:
            factor = next((f for names, f in _SIZE_UNITS.items() if lower in names), None)
        if factor is not None:
            return int(number * factor)
    if isinstance(raw, datetime.timedelta) or hasattr(raw, "normalized"):
        msg = (
            f"the unquoted value was read as a duration ({raw!r}), not a memory size: "
            'quote it (e.g. "512M")'
        )
        raise ValueError(msg)
    msg = f"{raw!r} is not a memory size (e.g. 512M, 1 GiB, 100k)"
    raise ValueError(msg)


def _number(raw: Any, what: str, convert: type[int] | type[float]) -> int | float:
    """``raw`` as a number (text stripped); booleans are not numbers here, though Python's are."""
    if isinstance(raw, bool):
        msg = f"{raw!r} is not {what}"
        raise ValueError(msg)
    try:
        return convert(raw) if isinstance(raw, int | float) else convert(str(raw).strip())
    except ValueError:
        msg = f"{raw!r} is not {what}"
        raise ValueError(msg) from None


@dataclass(frozen=True)
class ConfigParameter:
    """One parameter: its key, what it means, and its default (None: required)."""

    key: str
    description: str = ""
    default: Any = None
    kind: ClassVar[str] = "value"
    """How the parameter is described to users (``integer``, ``duration``...)."""

    def __post_init__(self) -> None:
        if not _KEY.match(self.key):
            msg = (
                f"parameter key {self.key!r}: use lowercase letters, digits and '-', "
                "starting with a letter (e.g. 'max-records')"
            )
            raise ConfigurationError(msg)
        if self.default is not None:
            self.parse(self.default)

    def parse(self, raw: Any) -> Any:
        """The value of ``raw``; raises ValueError saying what was expected."""
        return raw

    def value(self, streamlet: str, raw: Any) -> Any:
        """``raw`` parsed, or the default; ConfigurationError naming streamlet and key."""
        if raw is None:
            if self.default is None:
                msg = (
                    f"streamlet {streamlet!r}: parameter {self.key!r} ({self.kind}) has no "
                    f"default and no value: set firesteel.streamlets.{streamlet}."
                    f"config-parameters.{self.key}"
                )
                raise ConfigurationError(msg)
            raw = self.default
        try:
            return self.parse(raw)
        except ValueError as exc:
            msg = f"streamlet {streamlet!r}: parameter {self.key!r}: {exc}"
            raise ConfigurationError(msg) from None


@dataclass(frozen=True)
class IntegerParameter(ConfigParameter):
    """A whole number."""

    kind: ClassVar[str] = "integer"

    def parse(self, raw: Any) -> int:
        if isinstance(raw, float) and not raw.is_integer():
            msg = f"{raw!r} is not an integer"
            raise ValueError(msg)
        return int(_number(raw, "an integer", int))


@dataclass(frozen=True)
class DoubleParameter(ConfigParameter):
    """A floating-point number."""

    kind: ClassVar[str] = "double"

    def parse(self, raw: Any) -> float:
        return float(_number(raw, "a number", float))


@dataclass(frozen=True)
class BooleanParameter(ConfigParameter):
    """``true`` / ``false`` (HOCON also accepts ``yes``/``no``, ``on``/``off``)."""

    kind: ClassVar[str] = "boolean"

    def parse(self, raw: Any) -> bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("true", "yes", "on"):
            return True
        if text in ("false", "no", "off"):
            return False
        msg = f"{raw!r} is not a boolean (true or false)"
        raise ValueError(msg)


@dataclass(frozen=True)
class StringParameter(ConfigParameter):
    """Text, optionally matching a regular expression (whole value)."""

    pattern: str | None = None
    kind: ClassVar[str] = "string"

    def parse(self, raw: Any) -> str:
        text = str(raw)
        if self.pattern is not None and not re.fullmatch(self.pattern, text):
            msg = f"{text!r} does not match {self.pattern!r}"
            raise ValueError(msg)
        return text


@dataclass(frozen=True)
class DurationParameter(ConfigParameter):
    """A duration, as a ``datetime.timedelta``."""

    kind: ClassVar[str] = "duration"

    def parse(self, raw: Any) -> datetime.timedelta:
        return parse_duration(raw)


@dataclass(frozen=True)
class MemorySizeParameter(ConfigParameter):
    """A memory size, in bytes."""

    kind: ClassVar[str] = "memory size"

    def parse(self, raw: Any) -> int:
        return parse_memory_size(raw)
