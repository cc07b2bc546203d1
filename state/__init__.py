"""Keyed state for PySpark Structured Streaming: descriptors, processors, the stateful operator.

::

    from firesteel.state import KeyedProcessor, ValueStateDescriptor, stateful
    from firesteel.backends import FilesystemBackend

    out = stateful(df, key=["sensor"], processor=MyProcessor(),
                   output_schema="sensor string, count long",
                   backend=FilesystemBackend("file:///data/state"))
"""

import importlib
from typing import TYPE_CHECKING, Any

from firesteel.state.api import ListState, MapState, ValueState
from firesteel.state.descriptors import (
    ListStateDescriptor,
    MapStateDescriptor,
    StateDescriptor,
    StateKind,
    StateTtl,
    ValueStateDescriptor,
)
from firesteel.state.keygroups import DEFAULT_MAX_PARALLELISM, KeyGroupRange
from firesteel.state.serializers import MsgpackSerializer, PickleSerializer, Serializer

if TYPE_CHECKING:
    from firesteel.state.inspect import read_state
    from firesteel.state.operator import stateful
    from firesteel.state.processor import KeyedProcessor, KeyState, OpenContext

# The backends import this package's leaf modules (api, descriptors, keygroups), and the
# operator imports the backends: the names below load on first use to break that cycle.
_LAZY = {
    "read_state": "firesteel.state.inspect",
    "stateful": "firesteel.state.operator",
    "KeyedProcessor": "firesteel.state.processor",
    "KeyState": "firesteel.state.processor",
    "OpenContext": "firesteel.state.processor",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        msg = f"module 'firesteel.state' has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module(module), name)


__all__ = [
    "DEFAULT_MAX_PARALLELISM",
    "KeyGroupRange",
    "KeyState",
    "KeyedProcessor",
    "ListState",
    "ListStateDescriptor",
    "MapState",
    "MapStateDescriptor",
    "MsgpackSerializer",
    "OpenContext",
    "PickleSerializer",
    "Serializer",
    "StateDescriptor",
    "StateKind",
    "StateTtl",
    "ValueState",
    "ValueStateDescriptor",
    "read_state",
    "stateful",
]
