"""Keyed state: per-operation cost, snapshot cost, and a keyed count end to end.

Goals (issue 3): the heap backend at least 0.5x a raw Python dict per
operation; the firesteel operator at least 1.0x PySpark's own
``applyInPandasWithState`` end to end (issue 12 adds the other alternatives,
reported without a goal).

- Per operation (value get/put, list append, map put/get), for each backend:
  the state object of a real store, switched to each key the way the operator
  does (``set_current_key``) and then used once, against a raw ``dict`` doing
  the same lookup or insert on the same keys in the same loop. Both backends
  keep state in dicts and differ only in where snapshots go, so their figures
  should match.
- Snapshots (reported only): a full snapshot of 1M keys of a value state, and
  a delta snapshot after 1% of the keys changed, written to local disk,
  against ``msgpack`` of the same entries written to a file in one call.
  Seconds, with the file size in MB beside them.
- Savepoints (reported only, issue 34): writing a savepoint of 1M and of 10M keys
  of a value state from the filesystem backend's checkpoint (and again in a process
  of its own, :mod:`benchmarks.savepoint_process`, for its peak RSS), against
  the full checkpoint of the same state it is taken from; restoring it into a
  fresh filesystem store, against restoring that full checkpoint. Seconds, with
  each one's size in MB beside them.
- End to end (:mod:`benchmarks.keyed`): 5M events over 100k and over 1M keys,
  counted per key by the firesteel operator (filesystem backend) and by each
  alternative a PySpark user has: ``applyInPandasWithState`` and
  ``groupBy().count()`` on Spark's default state store,
  ``transformWithStateInPandas`` on its RocksDB store (the only one it runs on).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import msgpack
from pyspark import cloudpickle

from benchmarks.framework import Figure, Workload
from benchmarks.keyed import Scratch, alternatives, keyed_count_workloads
from benchmarks.state_ops import DECLARED, VALUE, ops_per_second
from firesteel.backends import FilesystemBackend, HeapBackend
from firesteel.backends.heap.store import HeapKeyedStore
from firesteel.backends.savepoint import create
from firesteel.core.context import TaskScope
from firesteel.state.backend import KeyedTask, OperatorSpec, StateBackend, StateDeclarations
from firesteel.state.clock import CLOCK
from firesteel.state.keygroups import KeyGroupRange
from firesteel.state.savepoint import SavepointRestore
from firesteel.state.savepoint.restore import declarations

# Spark's Python workers cannot import this module by name (benchmarks/ is not installed).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

# Untyped, the default: a declared ``type`` adds an isinstance check per write.
MAX_P = 128


_DIRS = Scratch()
_REPO = Path(__file__).resolve().parent.parent
"""Where ``python -m benchmarks...`` runs from (the savepoint writer's process starts there)."""
QUICK_KEYS = 2_000
"""Keys of a quick run's per-operation, snapshot and savepoint workloads: it proves each
path runs and measures nothing (these 14 workloads took 2.6 CPU-s at 20,000 keys, 1.4 at
2,000)."""


def setup(quick: bool) -> AbstractContextManager[None]:
    """A scratch folder for the group; removed afterwards."""
    return _DIRS.around_group("firesteel-bench-state-")


# -- per operation -------------------------------------------------------------------------


def _keys(count: int) -> list[tuple[tuple[str], int]]:
    return [((f"key-{i}",), i % MAX_P) for i in range(count)]


def _store(kind: str) -> Any:
    folder = _DIRS.fresh(kind)
    backend: StateBackend = (
        HeapBackend(str(folder), cache=False)
        if kind == "heap"
        else FilesystemBackend(f"file://{folder}", cache=False)
    )
    spec = OperatorSpec("bench", ("key",), MAX_P, 1)
    task = KeyedTask(TaskScope("bench", 0, 0, 0), KeyGroupRange(0, MAX_P - 1))
    return backend.open_store(spec, task, StateDeclarations(DECLARED), 0)


def _per_op(kind: str, op: str, keys: int) -> tuple[Callable[[], float], Callable[[], float]]:
    pairs = _keys(keys)

    def firesteel_side() -> float:
        store = _store(kind)
        return ops_per_second(store, op, pairs)

    def dict_side() -> float:
        values: dict[Any, int] = {}
        lists: dict[Any, list[int]] = {}
        maps: dict[Any, dict[str, int]] = {}
        for key, _ in pairs:
            values[key] = 1
            maps[key] = {"field": 1}
        started = time.perf_counter()
        if op == "value get":
            for key, _ in pairs:
                values.get(key)
        elif op == "value put":
            for key, _ in pairs:
                values[key] = 2
        elif op == "list append":
            for key, _ in pairs:
                found = lists.get(key)
                if found is None:
                    found = lists[key] = []
                found.append(2)
        elif op == "map put":
            for key, _ in pairs:
                found_map = maps.get(key)
                if found_map is None:
                    found_map = maps[key] = {}
                found_map["other"] = 2
        else:
            for key, _ in pairs:
                found_map = maps.get(key)
                if found_map is not None:
                    found_map.get("field")
        return len(pairs) / (time.perf_counter() - started)

    return firesteel_side, dict_side


# -- snapshots -----------------------------------------------------------------------------


def _snapshot(keys: int, churn: float) -> tuple[Callable[[], Figure], Callable[[], Figure]]:
    pairs = _keys(keys)
    changed = pairs[: max(1, int(keys * churn))]
    delta = churn < 1.0

    def firesteel_side() -> Figure:
        folder = _DIRS.fresh("snapshot")
        backend = FilesystemBackend(f"file://{folder}", full_snapshot_every=1000)
        spec = OperatorSpec("bench", ("key",), MAX_P, 1)
        store = HeapKeyedStore(backend.storage("bench"), spec, retain=5, full_snapshot_every=1000)
        everything = KeyGroupRange(0, MAX_P - 1)
        store.begin(
            KeyedTask(TaskScope("bench", 0, 0, 0), everything), StateDeclarations([VALUE]), 0
        )
        value = store.state(VALUE)
        for key, kg in pairs:
            store.set_current_key(key, kg)
            value.update(1)
        if delta:
            store.snapshot().wait()
            store.begin(
                KeyedTask(TaskScope("bench", 1, 0, 0), everything), StateDeclarations([VALUE]), 0
            )
            value = store.state(VALUE)  # state objects belong to one task
            for key, kg in changed:
                store.set_current_key(key, kg)
                value.update(2)
        started = time.perf_counter()
        store.snapshot().wait()
        elapsed = time.perf_counter() - started
        newest = sorted(folder.rglob("*.snap"))[-1]
        return Figure(elapsed, {"MB": newest.stat().st_size / 2**20})

    def msgpack_side() -> Figure:
        folder = _DIRS.fresh("msgpack")
        entries = changed if delta else pairs
        data = {key[0]: 2 for key, _ in entries}
        started = time.perf_counter()
        target = folder / "state.msgpack"
        target.write_bytes(msgpack.packb(data))
        elapsed = time.perf_counter() - started
        return Figure(elapsed, {"MB": target.stat().st_size / 2**20})

    return firesteel_side, msgpack_side


# -- savepoints ----------------------------------------------------------------------------


def _key_stream(count: int) -> Iterator[tuple[tuple[str], int]]:
    """:func:`_keys` one at a time: 10M keys as a list would take gigabytes of their own."""
    return (((f"key-{i}",), i % MAX_P) for i in range(count))


def _checkpointed(keys: int) -> tuple[FilesystemBackend, Figure]:
    """A filesystem backend holding ``keys`` keys of a value state in one full snapshot of
    batch 0, and the seconds that snapshot took with its size in MB."""
    folder = _DIRS.fresh("checkpoint")
    backend = FilesystemBackend(f"file://{folder}", cache=False)
    store = _begin(backend, 0, StateDeclarations([VALUE]))
    value = store.state(VALUE)
    for key, kg in _key_stream(keys):
        store.set_current_key(key, kg)
        value.update(1)
    started = time.perf_counter()
    store.snapshot().wait()
    elapsed = time.perf_counter() - started
    size = sum(p.stat().st_size for p in folder.rglob("*.snap")) / 2**20
    return backend, Figure(elapsed, {"MB": size})


def _begin(backend: FilesystemBackend, batch: int, declared: StateDeclarations) -> Any:
    spec = OperatorSpec("bench", ("key",), MAX_P, 1)
    task = KeyedTask(TaskScope("bench", batch, 0, 0), KeyGroupRange(0, MAX_P - 1))
    return backend.open_store(spec, task, declared, 0)


def _peak_rss_mb(backend: FilesystemBackend) -> float:
    """The peak RSS of the same savepoint write in a process of its own
    (:mod:`benchmarks.savepoint_process`): this process holds the benchmark's keys."""
    target = _DIRS.fresh("savepoint-alone") / "sp"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.savepoint_process", backend.location, str(target)],
        cwd=_REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    shutil.rmtree(target)
    return float(json.loads(done.stdout.splitlines()[-1])["peak_rss_mb"])


def _savepoint(keys: int) -> dict[str, tuple[Callable[[], Figure], Callable[[], Figure]]]:
    """The write and restore workloads' two sides, over one checkpoint made on first use.

    Everything is timed in this process; the savepoint write is done once more by
    :mod:`benchmarks.savepoint_process` for its peak RSS, reported beside its seconds.
    """
    made: dict[str, Any] = {}

    def checkpoint() -> tuple[FilesystemBackend, Figure]:
        if "backend" not in made:
            made["backend"], made["written"] = _checkpointed(keys)
        return made["backend"], made["written"]

    def write_savepoint() -> Figure:
        backend, _ = checkpoint()
        target = _DIRS.fresh("savepoint") / "sp"
        started = time.perf_counter()
        create(backend.location, str(target), batch=0)
        elapsed = time.perf_counter() - started
        made["savepoint"] = str(target)
        size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
        return Figure(elapsed, {"MB": size / 2**20, "peak RSS MB": _peak_rss_mb(backend)})

    def write_checkpoint() -> Figure:
        return _checkpointed(keys)[1]

    def restore_savepoint() -> Figure:
        if "savepoint" not in made:
            write_savepoint()
        restore = SavepointRestore(made["savepoint"])
        fresh = FilesystemBackend(f"file://{_DIRS.fresh('restored')}", cache=False)
        started = time.perf_counter()
        declared = declarations(restore, [VALUE, CLOCK], [])
        store = _begin(fresh, 0, declared)
        restore.apply(store, store.spec, store.task, declared)
        elapsed = time.perf_counter() - started
        sizes = [p.stat().st_size for p in Path(made["savepoint"]).rglob("*.parquet")]
        return Figure(elapsed, {"MB": sum(sizes) / 2**20})

    def restore_checkpoint() -> Figure:
        backend, written = checkpoint()
        started = time.perf_counter()
        _begin(backend, 1, StateDeclarations([VALUE]))
        return Figure(time.perf_counter() - started, {"MB": written.extra["MB"]})

    return {
        "write": (write_savepoint, write_checkpoint),
        "restore": (restore_savepoint, restore_checkpoint),
    }


# -- end to end ----------------------------------------------------------------------------


def workloads(quick: bool) -> list[Workload]:
    """Per-op on both backends, snapshots of 1M keys, keyed counts of 5M events (tiny if quick)."""
    keys = QUICK_KEYS if quick else 1_000_000
    snapshot_keys = QUICK_KEYS if quick else 1_000_000
    sizes = [(4_000, 100, 2)] if quick else [(5_000_000, 100_000, 10), (5_000_000, 1_000_000, 10)]
    repetitions, warmup = (1, 0) if quick else (3, 1)
    result: list[Workload] = []
    for kind in ("heap", "filesystem"):
        for op in ("value get", "value put", "list append", "map put", "map get"):
            ours, theirs = _per_op(kind, op, keys)
            result.append(
                Workload(
                    group="state",
                    name=f"{kind}: {op}, {keys:,} keys",
                    unit="ops/s",
                    baseline_name="raw Python dict",
                    goal=0.5 if kind == "heap" else None,
                    issue="issue 3" if kind == "heap" else None,
                    firesteel=ours,
                    baseline=theirs,
                    repetitions=repetitions,
                    warmup=warmup,
                )
            )
    for churn, label in ((1.0, "full"), (0.01, "delta at 1% churn")):
        ours_snapshot, theirs_snapshot = _snapshot(snapshot_keys, churn)
        result.append(
            Workload(
                group="state",
                name=f"snapshot {label}, {snapshot_keys:,} keys",
                unit="s",
                baseline_name="msgpack of the same entries to a file",
                goal=None,
                firesteel=ours_snapshot,
                baseline=theirs_snapshot,
                lower_is_better=True,
                repetitions=repetitions,
                warmup=0,
            )
        )
    # 10M keys: one run of each side (a minute or more each; the 1M runs give the spread).
    savepoint_runs = [(QUICK_KEYS, 1)] if quick else [(1_000_000, repetitions), (10_000_000, 1)]
    for savepoint_keys, runs in savepoint_runs:
        for what, (ours_savepoint, checkpoint) in _savepoint(savepoint_keys).items():
            result.append(
                Workload(
                    group="state",
                    name=f"savepoint {what}, {savepoint_keys:,} keys",
                    unit="s",
                    baseline_name=f"full checkpoint {what} of the same state (filesystem)",
                    goal=None,
                    issue="issue 34",
                    firesteel=ours_savepoint,
                    baseline=checkpoint,
                    lower_is_better=True,
                    repetitions=runs,
                    warmup=0,
                )
            )
    result.extend(
        keyed_count_workloads(
            "state",
            _DIRS,
            sizes,
            lambda work: FilesystemBackend(f"file://{work}/state"),
            alternatives(rocksdb=False, goals={"applyInPandasWithState": (1.0, "issue 3")}),
            quick=quick,
        )
    )
    return result
