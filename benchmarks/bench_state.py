"""Keyed state: per-operation cost, snapshot cost, and a keyed count end to end.

Goals (issue 3): the heap backend at least 0.5x a raw Python dict per
operation; the firesteel operator at least 1.0x PySpark's own
``applyInPandasWithState`` end to end.

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
- End to end: 5M events over 100k keys in Parquet files, read by Spark's file
  source with ``Trigger.AvailableNow`` (5 micro-batches), counted per key
  through :func:`firesteel.state.stateful` (filesystem backend) and through
  ``groupBy(...).applyInPandasWithState`` (Spark's state store), both
  emitting the updated count of every key each batch into the ``noop`` sink,
  both with ``spark.sql.shuffle.partitions`` partitions. Events per second.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import cloudpickle

from benchmarks import spark
from benchmarks.framework import Figure, Workload
from firesteel.backends import FilesystemBackend, HeapBackend
from firesteel.backends.heap.store import HeapKeyedStore
from firesteel.state import (
    KeyedProcessor,
    KeyState,
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
    stateful,
)
from firesteel.state.backend import OperatorSpec, StateBackend, TaskInfo
from firesteel.state.keygroups import KeyGroupRange

# Spark's Python workers cannot import this module by name (benchmarks/ is not installed).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

# Untyped, the default: a declared ``type`` adds an isinstance check per write.
VALUE = ValueStateDescriptor("value")
LIST = ListStateDescriptor("list")
MAP = MapStateDescriptor("map")
MAX_P = 128


@dataclass
class _Dirs:
    root: Path | None = None
    events: int = 0
    runs: int = 0

    def fresh(self, name: str) -> Path:
        assert self.root is not None
        self.runs += 1
        path = self.root / f"{name}-{self.runs}"
        path.mkdir(parents=True)
        return path


_DIRS = _Dirs()


@contextmanager
def setup(quick: bool) -> Iterator[None]:
    """A scratch folder for the group; removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="firesteel-bench-state-"))
    _DIRS.root = root
    try:
        yield
    finally:
        _DIRS.root = None
        shutil.rmtree(root, ignore_errors=True)


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
    task = TaskInfo("bench", 0, 0, KeyGroupRange(0, MAX_P - 1))
    return backend.open_store(spec, task, [VALUE, LIST, MAP], [], 0)


def _per_op(kind: str, op: str, keys: int) -> tuple[Callable[[], float], Callable[[], float]]:
    pairs = _keys(keys)

    def firesteel_side() -> float:
        store = _store(kind)
        switch = store.set_current_key
        value, lst, mapping = store.state(VALUE), store.state(LIST), store.state(MAP)
        for key, kg in pairs:  # populate (not timed) so reads hit
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
        store.begin(TaskInfo("bench", 0, 0, everything), [VALUE], [], 0)
        value = store.state(VALUE)
        for key, kg in pairs:
            store.set_current_key(key, kg)
            value.update(1)
        if delta:
            store.snapshot().wait()
            store.begin(TaskInfo("bench", 1, 0, everything), [VALUE], [], 0)
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


# -- end to end ----------------------------------------------------------------------------


class KeyedCount(KeyedProcessor):
    """Counts events per key; emits the key's new count once per batch."""

    count = ValueStateDescriptor("count", int)

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        count = state.value(self.count)
        total = (count.value() or 0) + rows.num_rows
        count.update(total)
        return ((key[0], total),)


def _count_with_pandas_state(key: Any, frames: Any, state: Any) -> Any:
    import pandas as pd

    total = state.get[0] if state.exists else 0
    for frame in frames:
        total += len(frame)
    state.update((total,))
    yield pd.DataFrame({"key": [key[0]], "count": [total]})


def _write_events(folder: Path, events: int, keys: int, files: int) -> None:
    folder.mkdir(parents=True)
    per_file = -(-events // files)
    rng = np.random.default_rng(7)
    for index, start in enumerate(range(0, events, per_file)):
        rows = min(per_file, events - start)
        key_ids = rng.integers(0, keys, rows)
        table = pa.table(
            {
                "seq": np.arange(start, start + rows, dtype=np.int64),
                "key": pa.array(np.char.add("key-", key_ids.astype(str))),
            }
        )
        pq.write_table(table, folder / f"part-{index:05d}.parquet")


@contextmanager
def _events(events: int, keys: int, files: int) -> Iterator[None]:
    assert _DIRS.root is not None
    spark.session()
    _write_events(_DIRS.root / "events", events, keys, files)
    _DIRS.events = events
    try:
        yield
    finally:
        shutil.rmtree(_DIRS.root / "events", ignore_errors=True)


def _stream(files_per_batch: int) -> Any:
    assert _DIRS.root is not None
    return (
        spark.session()
        .readStream.schema("seq long, key string")
        .option("maxFilesPerTrigger", files_per_batch)
        .parquet(str(_DIRS.root / "events"))
    )


def _run(frame: Any, mode: str, work: Path) -> float:
    started = time.perf_counter()
    query = (
        frame.writeStream.format("noop")
        .outputMode(mode)
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    processed = sum(p["numInputRows"] for p in query.recentProgress)
    if processed != _DIRS.events:
        msg = f"bench_state: the query read {processed} events of {_DIRS.events}"
        raise RuntimeError(msg)
    return _DIRS.events / elapsed


def _firesteel_count(files_per_batch: int) -> float:
    work = _DIRS.fresh("e2e-firesteel")
    counted = stateful(
        _stream(files_per_batch),
        key="key",
        processor=KeyedCount(),
        output_schema="key string, count long",
        backend=FilesystemBackend(f"file://{work}/state"),
        name="count",
    )
    return _run(counted, "append", work)


def _spark_count(files_per_batch: int) -> float:
    work = _DIRS.fresh("e2e-spark")
    counted = (
        _stream(files_per_batch)
        .groupBy("key")
        .applyInPandasWithState(
            _count_with_pandas_state,
            outputStructType="key string, count long",
            stateStructType="count long",
            outputMode="update",
            timeoutConf="NoTimeout",
        )
    )
    return _run(counted, "update", work)


def workloads(quick: bool) -> list[Workload]:
    """Per-op on both backends, snapshots of 1M keys, keyed count of 5M events (tiny if quick)."""
    keys = 20_000 if quick else 1_000_000
    snapshot_keys = 20_000 if quick else 1_000_000
    events, event_keys, files = (50_000, 1_000, 4) if quick else (5_000_000, 100_000, 10)
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
    per_batch = max(1, files // 5)
    result.append(
        Workload(
            group="state",
            name=f"keyed count, {events:,} events, {event_keys:,} keys",
            unit="events/s",
            baseline_name="PySpark applyInPandasWithState",
            goal=1.0,
            issue="issue 3",
            firesteel=lambda: _firesteel_count(per_batch),
            baseline=lambda: _spark_count(per_batch),
            # One run per side: applyInPandasWithState needs many minutes for 5M events.
            repetitions=1,
            warmup=0,
            setup=lambda: _events(events, event_keys, files),
        )
    )
    return result
