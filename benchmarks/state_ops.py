"""The firesteel side of the per-operation keyed-state benchmarks (state and rocksdb groups).

One operation (``value get``, ``value put``, ``list append``, ``map put``,
``map get``) timed over every key of ``pairs`` on an open keyed store, after a
populating pass (not timed) so reads hit: operations per second. The groups
differ in the store they open and the baseline beside it, not in this loop.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from firesteel.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

VALUE = ValueStateDescriptor("value")
LIST = ListStateDescriptor("list")
MAP = MapStateDescriptor("map")
DECLARED = (VALUE, LIST, MAP)
"""The states a per-op store declares."""


def ops_per_second(store: Any, op: str, pairs: Sequence[tuple[tuple[str], int]]) -> float:
    """Time ``op`` once per (key, key group) of ``pairs`` on ``store``; operations per second."""
    switch = store.set_current_key
    value, lst, mapping = store.state(VALUE), store.state(LIST), store.state(MAP)
    for key, kg in pairs:
        switch(key, kg)
        value.update(1)
        mapping.put("field", 1)
    started = time.perf_counter()
    if op == "value get":
        for key, kg in pairs:
            switch(key, kg)
            value.value()
    elif op == "value put":
        for key, kg in pairs:
            switch(key, kg)
            value.update(2)
    elif op == "list append":
        for key, kg in pairs:
            switch(key, kg)
            lst.append(2)
    elif op == "map put":
        for key, kg in pairs:
            switch(key, kg)
            mapping.put("other", 2)
    else:
        for key, kg in pairs:
            switch(key, kg)
            mapping.get("field")
    return len(pairs) / (time.perf_counter() - started)
