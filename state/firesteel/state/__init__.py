"""Keyed state for PySpark Structured Streaming: descriptors, processors, the stateful operator.

The backend interface (:mod:`firesteel.state.backend`) lives here; the backends that
implement it (:mod:`firesteel.backends`, ``firesteel-rocksdb``) import it, never the
other way round::

    from firesteel.state import KeyedProcessor, ValueStateDescriptor, stateful
    from firesteel.backends import FilesystemBackend

    out = stateful(df, key=["sensor"], processor=MyProcessor(),
                   output_schema="sensor string, count long",
                   backend=FilesystemBackend("file:///data/state"))
"""

from firesteel.state.api import ListState, MapState, ValueState
from firesteel.state.backend import (
    KeyedStateStore,
    KeyedTask,
    OperatorSpec,
    StateBackend,
    StateDeclarations,
)
from firesteel.state.broadcast import BroadcastContext, BroadcastMap
from firesteel.state.coprocess import CoProcessor
from firesteel.state.descriptors import (
    BroadcastStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    StateDescriptor,
    StateKind,
    StateTtl,
    ValueStateDescriptor,
)
from firesteel.state.eventtime import (
    BoundedOutOfOrderness,
    TimeDomain,
    late_output,
    main_output,
)
from firesteel.state.keygroups import DEFAULT_MAX_PARALLELISM, KeyGroupRange
from firesteel.state.operator import stateful
from firesteel.state.processor import KeyedProcessor, KeyState, OpenContext
from firesteel.state.serializers import MsgpackSerializer, PickleSerializer, Serializer

__all__ = [
    "DEFAULT_MAX_PARALLELISM",
    "BoundedOutOfOrderness",
    "BroadcastContext",
    "BroadcastMap",
    "BroadcastStateDescriptor",
    "CoProcessor",
    "KeyGroupRange",
    "KeyState",
    "KeyedProcessor",
    "KeyedStateStore",
    "KeyedTask",
    "ListState",
    "ListStateDescriptor",
    "MapState",
    "MapStateDescriptor",
    "MsgpackSerializer",
    "OpenContext",
    "OperatorSpec",
    "PickleSerializer",
    "Serializer",
    "StateBackend",
    "StateDeclarations",
    "StateDescriptor",
    "StateKind",
    "StateTtl",
    "TimeDomain",
    "ValueState",
    "ValueStateDescriptor",
    "late_output",
    "main_output",
    "stateful",
]
