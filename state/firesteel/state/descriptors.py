"""State descriptors: how a processor declares the state it keeps per key.

A descriptor names a state, says its kind (value, list or map), the Python type
of its values, its time-to-live and its serializer. Declare descriptors as
class attributes of a :class:`~firesteel.state.processor.KeyedProcessor` (or
create them in ``open``) and fetch the state for the current key with
``state.get(descriptor)`` inside ``process``.

Names are the identity of a state across restarts: renaming a descriptor
starts that state empty; changing its kind or serializer is refused on restore.
Its ``type`` may evolve by Avro's rules (:mod:`firesteel.state.schemas`): a
field added with a default, a field removed, a number widened, a field renamed
through ``renames``.
"""

from __future__ import annotations

import datetime as dt
import enum
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from firesteel.core.spi import ConfigError
from firesteel.state.schemas import value_schema
from firesteel.state.serializers import MsgpackSerializer, PickleSerializer, Serializer

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
RESERVED_PREFIX = "__"
"""State names starting with this are firesteel's own (timers, the batch clock)."""


class StateKind(enum.Enum):
    """The three keyed state primitives."""

    VALUE = "value"
    LIST = "list"
    MAP = "map"


@dataclass(frozen=True)
class StateTtl:
    """Time-to-live of state entries, measured in processing time (batch time).

    An entry expires ``ttl`` after it was last written (``refresh_on_read``
    also counts reads, like Flink's ``OnReadAndWrite``, for value state only so
    far: a list element or map entry is refreshed by writing it). Expired entries are
    invisible at once, are dropped when next touched, and are never written to
    a snapshot; a full snapshot sweeps all of them. For lists the TTL applies
    to each element, for maps to each entry.
    """

    ttl: dt.timedelta
    refresh_on_read: bool = False

    def __post_init__(self) -> None:
        if self.ttl <= dt.timedelta(0):
            msg = f"state TTL must be positive, got {self.ttl}"
            raise ConfigError(msg)

    @property
    def millis(self) -> int:
        """The TTL in milliseconds."""
        return int(self.ttl.total_seconds() * 1000)


def _ttl(value: StateTtl | dt.timedelta | float | None) -> StateTtl | None:
    if value is None or isinstance(value, StateTtl):
        return value
    if isinstance(value, dt.timedelta):
        return StateTtl(value)
    return StateTtl(dt.timedelta(seconds=float(value)))


@dataclass(frozen=True)
class StateDescriptor:
    """Common fields; use :class:`ValueStateDescriptor`, :class:`ListStateDescriptor` or
    :class:`MapStateDescriptor`.

    ``type`` documents and checks what is stored: ``update`` refuses a value
    that is not an instance of it (``int`` is accepted for ``float``), and the
    default serializer rebuilds dataclasses and tuples from it. ``ttl`` accepts
    a :class:`StateTtl`, a ``timedelta`` or seconds. ``renames`` maps the old
    names of renamed fields (or dataclasses) of ``type`` to their new names, so
    a restore finds the values stored under the old ones (Avro aliases).
    """

    name: str
    type: type | None = None
    ttl: StateTtl | dt.timedelta | float | None = None
    serializer: Serializer | None = None
    renames: Mapping[str, str] | None = field(default=None, compare=False, hash=False)
    kind: StateKind = field(init=False, default=StateKind.VALUE)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name) or self.name.startswith(RESERVED_PREFIX):
            msg = (
                f"state name {self.name!r}: use 1-128 letters, digits, '_', '-' or '.', "
                f"not starting with {RESERVED_PREFIX!r}"
            )
            raise ConfigError(msg)
        object.__setattr__(self, "ttl", _ttl(self.ttl))
        if self.serializer is None:
            object.__setattr__(self, "serializer", MsgpackSerializer(self.type))
        elif isinstance(self.serializer, PickleSerializer):
            logger.warning(
                "state '%s' is pickled: its type cannot evolve (a restore refuses any other "
                "type than the one its snapshots recorded); use the default msgpack "
                "serializer for state whose type will change",
                self.name,
            )
        object.__setattr__(self, "renames", dict(self.renames or {}))

    @property
    def schema(self) -> Any:
        """The Avro schema of the values (see :mod:`firesteel.state.schemas`)."""
        return value_schema(self.type, self.renames)

    @property
    def ttl_config(self) -> StateTtl | None:
        """The TTL, normalised to :class:`StateTtl` (or None)."""
        return self.ttl if isinstance(self.ttl, StateTtl) else None

    @property
    def value_serializer(self) -> Serializer:
        """The serializer, never None after construction."""
        assert self.serializer is not None
        return self.serializer

    def check_type(self, value: Any) -> None:
        """Raise ``TypeError`` naming the state when ``value`` is not of the declared type."""
        expected = self.type
        if expected is None or value is None or isinstance(value, expected):
            return
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            return
        msg = (
            f"state '{self.name}' holds {expected.__name__} values, "
            f"got {type(value).__name__}: {value!r:.80}"
        )
        raise TypeError(msg)


@dataclass(frozen=True)
class ValueStateDescriptor(StateDescriptor):
    """One value per key (Flink's ``ValueState``)."""

    kind: StateKind = field(init=False, default=StateKind.VALUE)


@dataclass(frozen=True)
class ListStateDescriptor(StateDescriptor):
    """A list of values per key; ``append`` is O(1) and delta snapshots store only appends."""

    kind: StateKind = field(init=False, default=StateKind.LIST)


@dataclass(frozen=True)
class MapStateDescriptor(StateDescriptor):
    """A map per key with per-entry get/put/delete; ``type`` is the map values' type.

    ``key_type`` is the type of the map's own keys (``str`` by default); map
    keys are encoded with msgpack, so they must be msgpack-able.
    """

    key_type: type | None = None
    kind: StateKind = field(init=False, default=StateKind.MAP)


@dataclass(frozen=True)
class BroadcastStateDescriptor(MapStateDescriptor):
    """A map kept identically in every operator partition, fed by the operator's broadcast
    input (Flink's ``BroadcastState``; see :mod:`firesteel.state.broadcast`).

    ``process_broadcast`` writes it; ``process`` and ``on_timer`` read it with
    ``state.broadcast(descriptor)``. No TTL: every partition must hold the same entries.
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.ttl is not None:
            msg = f"broadcast state '{self.name}' cannot have a TTL"
            raise ConfigError(msg)


def reserved_value_state(name: str, value_type: type) -> ValueStateDescriptor:
    """A value state of firesteel's own, named ``name`` (which must start with
    :data:`RESERVED_PREFIX`, the names a user's descriptor may not take)."""
    if not name.startswith(RESERVED_PREFIX):
        msg = f"reserved state name {name!r} must start with {RESERVED_PREFIX!r}"
        raise ValueError(msg)
    descriptor = ValueStateDescriptor(name[len(RESERVED_PREFIX) :], value_type)
    object.__setattr__(descriptor, "name", name)
    return descriptor
