"""Helpers of the RocksDB backend's tests: stores as a worker holds them, checkpoint listings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from firesteel.core.context import TaskScope
from firesteel.rocksdb import RocksDBBackend
from firesteel.rocksdb.local import LocalFolder
from firesteel.rocksdb.store import RocksDBKeyedStore
from firesteel.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from firesteel.state.backend import KeyedTask, OperatorSpec, StateDeclarations
from firesteel.state.keygroups import KeyGroupRange

COUNT = ValueStateDescriptor("count", int)
EVENTS = ListStateDescriptor("events", str)
ATTRS = MapStateDescriptor("attrs", float)
ALL = [COUNT, EVENTS, ATTRS]
MAX_P = 8
EVERYTHING = KeyGroupRange(0, MAX_P - 1)
SPEC = OperatorSpec("op", ("k",), MAX_P, 1)


def backend(root: Path, **options: Any) -> RocksDBBackend:
    """A backend checkpointing to ``root/ck`` with instances under ``root/local``."""
    return RocksDBBackend(f"file://{root}/ck", local_dir=str(root / "local"), **options)


def worker(root: Path, name: str, chosen: RocksDBBackend, retain: int = 10) -> RocksDBKeyedStore:
    """A store as one Python worker keeps it between tasks (its own local folder)."""
    return RocksDBKeyedStore(
        chosen.storage("op"),
        SPEC,
        EVERYTHING,
        folder=LocalFolder(root / name),
        options=chosen.options,
        retain=retain,
        cached=True,
    )


def run(
    store: RocksDBKeyedStore, batch: int, writes: dict[int, int], now_ms: int = 1_000
) -> RocksDBKeyedStore:
    """One task of ``batch``: ``count`` of key ``(i,)`` set to ``value`` for each item."""
    store.begin(KeyedTask(TaskScope("q", batch, 0, 0), EVERYTHING), StateDeclarations(ALL), now_ms)
    for index, value in writes.items():
        store.set_current_key((index,), index % MAX_P)
        store.state(COUNT).update(value)
    store.snapshot().wait()
    return store


def read(store: RocksDBKeyedStore, batch: int, indexes: range) -> dict[int, Any]:
    """The ``count`` of each key, read in a task of ``batch`` (no snapshot: the task fails)."""
    store.begin(KeyedTask(TaskScope("q", batch, 0, 0), EVERYTHING), StateDeclarations(ALL), 1_000)
    found = {}
    for index in indexes:
        store.set_current_key((index,), index % MAX_P)
        found[index] = store.state(COUNT).value()
    store.discard()
    return found


def manifests(root: Path, version: int) -> list[dict[str, Any]]:
    """The content of every manifest of ``version``."""
    folder = root / "ck" / "op" / f"v{version:012d}"
    return [json.loads(p.read_text())["content"] for p in sorted(folder.glob("*.json"))]


def shared_paths(content: dict[str, Any]) -> set[str]:
    """The shared files a manifest references."""
    return {f["path"] for f in content["files"] if f["path"].startswith("shared/")}


def stored_shared(root: Path) -> set[str]:
    """Every file in the operator's ``shared/`` folder."""
    return {f"shared/{p.name}" for p in (root / "ck" / "op" / "shared").iterdir()}
