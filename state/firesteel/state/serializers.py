"""How state values and keys become bytes in a snapshot.

The default, :class:`MsgpackSerializer`, is a data format: loading a snapshot
from shared storage never runs code. :class:`PickleSerializer` exists for values
msgpack cannot express, and only by explicit opt-in on the descriptor; a
snapshot records which serializer wrote each state, and a state written with
pickle is refused unless its descriptor opts in again.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import pickle
import threading
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import msgpack

from firesteel.core.spi import ConfigError

_EXT_NAIVE_DATETIME = 1
_EXT_DATE = 2
_EXT_DECIMAL = 3
_EXT_TIME = 4
_EXT_TIMEDELTA = 5


def _default(value: Any) -> Any:
    """msgpack hook for the types Arrow hands to Python besides the msgpack natives."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            return msgpack.Timestamp.from_datetime(value)
        return msgpack.ExtType(_EXT_NAIVE_DATETIME, value.isoformat().encode())
    if isinstance(value, dt.date):
        return msgpack.ExtType(_EXT_DATE, value.isoformat().encode())
    if isinstance(value, dt.time):
        return msgpack.ExtType(_EXT_TIME, value.isoformat().encode())
    if isinstance(value, dt.timedelta):
        return msgpack.ExtType(_EXT_TIMEDELTA, str(value.total_seconds()).encode())
    if isinstance(value, decimal.Decimal):
        return msgpack.ExtType(_EXT_DECIMAL, str(value).encode())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, set | frozenset):
        return sorted(value)
    if hasattr(value, "item"):  # numpy / pandas scalars
        return value.item()
    msg = (
        f"cannot store a {type(value).__name__} in state with msgpack; use plain types "
        "(numbers, str, bytes, list, dict, datetime, Decimal, dataclasses) or opt in to "
        "PickleSerializer() on the state descriptor"
    )
    raise TypeError(msg)


def _ext_hook(code: int, data: bytes) -> Any:
    text = data.decode()
    if code == _EXT_NAIVE_DATETIME:
        return dt.datetime.fromisoformat(text)
    if code == _EXT_DATE:
        return dt.date.fromisoformat(text)
    if code == _EXT_TIME:
        return dt.time.fromisoformat(text)
    if code == _EXT_TIMEDELTA:
        return dt.timedelta(seconds=float(text))
    if code == _EXT_DECIMAL:
        return decimal.Decimal(text)
    return msgpack.ExtType(code, data)


_local = threading.local()


def _packer() -> msgpack.Packer:
    packer = getattr(_local, "packer", None)
    if packer is None:
        packer = _local.packer = msgpack.Packer(default=_default, datetime=False, use_bin_type=True)
    return packer


def pack(value: Any) -> bytes:
    """Encode a value with firesteel's msgpack conventions (used for keys too)."""
    return _packer().pack(value)


def unpack(data: bytes) -> Any:
    """Decode what :func:`pack` wrote."""
    return msgpack.unpackb(
        data, ext_hook=_ext_hook, raw=False, timestamp=3, strict_map_key=False, use_list=True
    )


def pack_key(key: tuple[Any, ...]) -> bytes:
    """Encode a grouping key (always a tuple of the key columns' values) as a msgpack array."""
    return _packer().pack(key)


def key_packer() -> Any:
    """The bound ``pack`` method of this thread's packer, for encoding many keys in a loop."""
    return _packer().pack


def unpack_key(data: bytes) -> tuple[Any, ...]:
    """Decode a grouping key back to the tuple the processor saw."""
    return tuple(unpack(data))


class Serializer(ABC):
    """Turns one state value (or map user key) into bytes and back.

    ``name`` is stored in every snapshot beside the state it encoded; restore
    refuses a snapshot whose serializer name differs from the descriptor's.
    """

    name: ClassVar[str]

    @abstractmethod
    def dumps(self, value: Any) -> bytes:
        """Encode one value; raise ``TypeError`` naming the type it cannot encode."""

    @abstractmethod
    def loads(self, data: bytes) -> Any:
        """Decode what :meth:`dumps` wrote."""


class MsgpackSerializer(Serializer):
    """The default: msgpack plus datetime/date/Decimal/dataclass support.

    ``type`` (optional) is the Python type values are rebuilt as: a dataclass
    is stored as a map of its fields and rebuilt with ``type(**fields)``;
    a ``tuple`` is rebuilt from msgpack's array. Other types are returned as
    msgpack decodes them.
    """

    name = "msgpack"

    def __init__(self, type: type | None = None) -> None:
        self.type = type
        self._is_dataclass = type is not None and dataclasses.is_dataclass(type)

    def dumps(self, value: Any) -> bytes:
        return _packer().pack(value)

    def loads(self, data: bytes) -> Any:
        return self.build(unpack(data))

    def build(self, value: Any) -> Any:
        """Rebuild ``type`` from the plain value msgpack (or a schema resolution) gave."""
        if self._is_dataclass and isinstance(value, dict):
            return self.type(**value)  # type: ignore[misc]
        if self.type is tuple and isinstance(value, list):
            return tuple(value)
        return value


class PickleSerializer(Serializer):
    """Pickle: only by explicit opt-in. Loading a pickled snapshot runs code.

    Use it only for state whose snapshots nobody else can write to. A pickled
    state cannot evolve: a restore refuses a declared type other than the one
    its snapshot recorded (see :mod:`firesteel.state.schemas`).
    """

    name = "pickle"

    def dumps(self, value: Any) -> bytes:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)

    def loads(self, data: bytes) -> Any:
        return pickle.loads(data)


def check_serializer(state: str, declared: Serializer, stored: str, where: str) -> None:
    """Refuse a snapshot of ``state`` written by another serializer than the descriptor's."""
    if declared.name == stored:
        return
    if stored == PickleSerializer.name:
        msg = (
            f"{where}: state '{state}' was written with pickle, which runs code on load; "
            "declare serializer=PickleSerializer() on its descriptor if you trust this checkpoint"
        )
    else:
        msg = (
            f"{where}: state '{state}' was written with serializer '{stored}' but its "
            f"descriptor declares '{declared.name}'"
        )
    raise ConfigError(msg)
