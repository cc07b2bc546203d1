"""RocksDB backend: per-operation cost, incremental checkpoints, restore, a keyed count end to end.

Goals (issue 11): per operation at least 0.7x raw rocksdict; an incremental
checkpoint after 1% of 1M keys changed at most 5% of a full one; end to end at
least 10x PySpark's ``applyInPandasWithState`` and 0.5x Spark's built-in count.

- Per operation (value get/put, list append, map put/get), 1M keys: the state
  object of a real store, switched to each key the way the operator does
  (``set_current_key``), against rocksdict used directly by a program that
  knows its keys: its own (pickle) encoding of the same string keys, puts
  through ``WriteBatch`` of 1,000, point ``get``\\s (multi-get measured no
  faster here), the write-ahead log off on both sides. Both sides touch the
  keys in one shuffled order (fixed seed), as a keyed operator meets keys in
  the order events arrive. Until 2026-11-24 they went in creation order
  (``key-0``, ``key-1``, ...): the raw side's neighbouring keys then shared
  cached blocks while firesteel's key-group prefix scatters them, and that
  locality made most of the read gap (value get, firesteel's options, 1M
  keys: 0.35-0.39x in creation order, 0.78-0.82x shuffled). Both sides also
  populate in the same order, each key's value and then its map entry (until
  2026-11-25 the raw side wrote all values, then all map entries, which left
  its map keys in the memtable and its value keys in SST files). Each operation runs
  twice: against rocksdict's default options (what a user would start from;
  the goal), and against an instance with firesteel's own tuned options
  (bounded block cache holding index and filters, partitioned filters, memtables
  charged to the cache), in raw mode with byte keys: that ratio is firesteel's
  own Python work alone.
- Checkpoints (reported in MB uploaded, with seconds beside), each batch
  changing 1% of 1M keys: the next checkpoint after the keys were loaded and
  the mean of the first ten (compactions included), each against the full
  checkpoint of the same freshly loaded keys (everything uploaded, the first
  version of a new location); and the steady state of a running job, the
  mean of twenty checkpoints after ten others, against every file of the last
  version (what a full checkpoint of that state uploads). The first ten
  include the one-off merge of the bulk-loaded runs.
- Restore: a new worker restoring the 1M keys from storage (download, verify,
  open) against copying the same files with ``shutil``.
- End to end: 5M events over 1M keys in Parquet files, read by Spark's file
  source with ``Trigger.AvailableNow`` (5 micro-batches), counted per key
  through :func:`firesteel.state.stateful` on this backend and, with Spark's
  RocksDB state store provider, through ``applyInPandasWithState``,
  ``transformWithStateInPandas`` and ``groupBy().count()`` (update mode, the
  JVM ceiling). Every query emits the updated count of every key each batch
  into the ``noop`` sink; events per second.
"""

from __future__ import annotations

import random
import shutil
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from statistics import mean
from typing import Any

from pyspark import cloudpickle

from benchmarks.framework import Figure, Workload
from benchmarks.keyed import Scratch, alternatives, keyed_count_workloads
from benchmarks.state_ops import DECLARED, VALUE, ops_per_second
from firesteel.core.context import TaskScope
from firesteel.core.errors import MissingDependencyError
from firesteel.state.backend import KeyedTask, OperatorSpec, StateDeclarations
from firesteel.state.keygroups import KeyGroupRange

try:
    import rocksdict as rd

    from firesteel.rocksdb import RocksDBBackend, RocksDBOptions
except ModuleNotFoundError as exc:
    raise MissingDependencyError(exc.name or "firesteel.rocksdb", "-e ./backends/rocksdb") from exc

# Spark's Python workers cannot import this module by name (benchmarks/ is not installed).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

MAX_P = 128
EVERYTHING = KeyGroupRange(0, MAX_P - 1)
SPEC = OperatorSpec("bench", ("key",), MAX_P, 1)
BATCH = 1_000
QUICK_KEYS = 2_000
"""Keys of a quick run's per-operation, checkpoint and restore workloads: it proves each path
runs and measures nothing (these 19 workloads took 6.3 CPU-s at 20,000 keys, 1.7 at 2,000)."""
OPERATIONS = ("value get", "value put", "list append", "map put", "map get")
ROCKSDICT_MEMTABLES = RocksDBOptions(
    write_buffer_size=64 * 1024 * 1024, memory_budget=256 * 1024 * 1024
)
"""firesteel tuned with RocksDB's default memtable size (64 MiB, as rocksdict opens it):
1M keys then stay in the memtable on both sides, and the ratio is firesteel's own code."""


_DIRS = Scratch()


def setup(quick: bool) -> AbstractContextManager[None]:
    """A scratch folder for the group; removed afterwards."""
    return _DIRS.around_group("firesteel-bench-rocksdb-")


def _backend(folder: Path, **options: Any) -> RocksDBBackend:
    return RocksDBBackend(f"file://{folder}/ck", local_dir=str(folder / "local"), **options)


def _task(batch: int) -> KeyedTask:
    return KeyedTask(TaskScope("bench", batch, 0, 0), EVERYTHING)


def _keys(count: int) -> list[tuple[tuple[str], int]]:
    return [((f"key-{i}",), i % MAX_P) for i in range(count)]


def _arrival_order(count: int) -> list[tuple[tuple[str], int]]:
    """:func:`_keys` shuffled (fixed seed): the order a keyed operator meets keys in."""
    pairs = _keys(count)
    random.Random(11).shuffle(pairs)
    return pairs


# -- per operation -------------------------------------------------------------------------


def _text_element(name: str, index: int) -> str:
    return f"{name}\0{index}"


def _bytes_element(name: bytes, index: int) -> bytes:
    return name + b"\0" + index.to_bytes(8, "big")


def _per_op(
    op: str, keys: int, *, same_options: bool = False, options: RocksDBOptions | None = None
) -> tuple[Callable[[], float], Callable[[], float]]:
    """firesteel's state object and raw rocksdict doing ``op`` on every key; the raw side
    opens its instance with rocksdict's defaults, or with firesteel's tuned options
    (``same_options``: raw mode, its own byte keys). ``options``: firesteel's tuning
    (default: :class:`RocksDBOptions`'s defaults)."""
    pairs = _arrival_order(keys)
    tuning = options or RocksDBOptions()

    def firesteel_side() -> float:
        store: Any = _backend(_DIRS.fresh("op"), cache=False, options=tuning).open_store(
            SPEC, _task(0), StateDeclarations(DECLARED), 0
        )
        rate = ops_per_second(store, op, pairs)
        store.discard()
        return rate

    def rocksdict_side() -> float:
        folder = _DIRS.fresh("raw")
        db = rd.Rdict(str(folder / "db"), tuning.native() if same_options else None)
        write_options = rd.WriteOptions()
        write_options.disable_wal = True
        db.set_write_options(write_options)
        # rocksdict's default mode encodes str keys and int values itself; raw mode takes bytes.
        names: list[Any] = [key[0] for key, _ in pairs]
        one: Any = 1
        two: Any = 2
        field: Any = "\0field"
        other: Any = "\0other"
        element: Callable[[Any, int], Any] = _text_element
        if same_options:
            names = [name.encode() for name in names]
            one, two, field, other = b"\x01", b"\x02", b"\0field", b"\0other"
            element = _bytes_element

        def put_all(items: Any) -> None:
            batch = rd.WriteBatch(raw_mode=same_options)
            for stored_key, stored in items:
                batch.put(stored_key, stored)
                if len(batch) == BATCH:
                    db.write(batch)
                    batch = rd.WriteBatch(raw_mode=same_options)
            db.write(batch)

        # Populate (not timed) in firesteel's order, each key's value then its map entry:
        # the order decides which keys a flush moves out of the memtable.
        put_all(pair for name in names for pair in ((name, one), (name + field, one)))
        get = db.get
        started = time.perf_counter()
        if op == "value get":
            for name in names:
                get(name)
        elif op == "value put":
            put_all((name, two) for name in names)
        elif op == "list append":
            put_all((element(name, index), two) for index, name in enumerate(names))
        elif op == "map put":
            put_all((name + other, two) for name in names)
        else:
            for name in names:
                get(name + field)
        elapsed = time.perf_counter() - started
        db.close()
        return len(pairs) / elapsed

    return firesteel_side, rocksdict_side


# -- checkpoints and restore ---------------------------------------------------------------


def _loaded(keys: int) -> tuple[RocksDBBackend, Any]:
    """A store at version 0 holding ``keys`` keys of the value state, snapshotted."""
    backend = _backend(_DIRS.fresh("ck"))
    store: Any = backend.open_store(SPEC, _task(0), StateDeclarations([VALUE]), 0)
    value = store.state(VALUE)
    for key, kg in _keys(keys):
        store.set_current_key(key, kg)
        value.update(1)
    return backend, store


def _uploaded(backend: RocksDBBackend, version: int) -> float:
    """MB the attempt that wrote ``version`` uploaded (its new SSTs and private files)."""
    storage = backend.storage(SPEC.name)
    [ref] = storage.list_version(version)
    manifest = storage.read_manifest(ref)
    return sum(f.size for f in manifest.files if ref.attempt in f.path) / 2**20


def _timed_snapshot(store: Any) -> float:
    started = time.perf_counter()
    store.snapshot().wait()
    return time.perf_counter() - started


def _churned(
    keys: int, churn: float, batches: int
) -> tuple[RocksDBBackend, list[float], list[float]]:
    """A store loaded with ``keys`` keys, then ``batches`` batches each changing a different
    ``churn`` of them: the backend, and MB uploaded and seconds of each batch's snapshot."""
    pairs = _keys(keys)
    changed = max(1, int(keys * churn))
    backend, store = _loaded(keys)
    store.snapshot().wait()
    megabytes, seconds = [], []
    for batch in range(1, batches + 1):
        store = backend.open_store(SPEC, _task(batch), StateDeclarations([VALUE]), 0)
        value = store.state(VALUE)
        start = batch * 7919 % keys
        for index in range(start, start + changed):
            key, kg = pairs[index % keys]
            store.set_current_key(key, kg)
            value.update(batch)
        seconds.append(_timed_snapshot(store))
        megabytes.append(_uploaded(backend, batch))
    return backend, megabytes, seconds


def _checkpoints(
    keys: int, churn: float, rounds: int, warmup: int
) -> tuple[Callable[[], Figure], Callable[[], Figure]]:
    """Mean upload of ``rounds`` checkpoints after ``warmup`` others, beside a full checkpoint:
    of a freshly loaded store without warm-up, else of the last version's every file."""

    def incremental_side() -> Figure:
        _, megabytes, seconds = _churned(keys, churn, warmup + rounds)
        return Figure(mean(megabytes[warmup:]), {"s": mean(seconds[warmup:])})

    def full_side() -> Figure:
        if warmup:
            backend, _, _ = _churned(keys, churn, warmup + rounds)
            storage = backend.storage(SPEC.name)
            [ref] = storage.list_version(warmup + rounds)
            return Figure(sum(f.size for f in storage.read_manifest(ref).files) / 2**20)
        backend, store = _loaded(keys)
        elapsed = _timed_snapshot(store)
        return Figure(_uploaded(backend, 0), {"s": elapsed})

    return incremental_side, full_side


def _restore(keys: int) -> tuple[Callable[[], float], Callable[[], float]]:
    prepared: dict[str, Any] = {}

    def prepare() -> tuple[RocksDBBackend, Path]:
        if "backend" not in prepared:
            backend, store = _loaded(keys)
            store.snapshot().wait()
            prepared["backend"] = backend
        backend = prepared["backend"]
        return backend, Path(backend.path.removeprefix("file://")) / SPEC.name

    def firesteel_side() -> float:
        backend, _ = prepare()
        fresh = RocksDBBackend(backend.path, local_dir=str(_DIRS.fresh("restore")), cache=False)
        started = time.perf_counter()
        store: Any = fresh.open_store(SPEC, _task(1), StateDeclarations([VALUE]), 0)
        elapsed = time.perf_counter() - started
        store.discard()
        return elapsed

    def copy_side() -> float:
        _, stored = prepare()
        started = time.perf_counter()
        shutil.copytree(stored, _DIRS.fresh("copy") / "op")
        return time.perf_counter() - started

    return firesteel_side, copy_side


def workloads(quick: bool) -> list[Workload]:
    """Per-op, checkpoints and restore of 1M keys, keyed count of 5M events (tiny if quick)."""
    keys = QUICK_KEYS if quick else 1_000_000
    events, event_keys, files = (4_000, 100, 2) if quick else (5_000_000, 1_000_000, 10)
    repetitions, warmup = (1, 0) if quick else (3, 1)
    result: list[Workload] = []
    per_op = [
        (op, variant, baseline)
        for variant, baseline in (
            ("", "raw rocksdict"),
            ("", "raw rocksdict, firesteel's options"),
            (", rocksdict's memtable size", "raw rocksdict"),
        )
        for op in OPERATIONS
    ]
    for op, variant, baseline in per_op:
        same = baseline != "raw rocksdict"
        ours, theirs = _per_op(
            op, keys, same_options=same, options=ROCKSDICT_MEMTABLES if variant else None
        )
        result.append(
            Workload(
                group="rocksdb",
                name=f"{op}, {keys:,} keys{variant}",
                unit="ops/s",
                baseline_name=baseline,
                goal=None if same else 0.7,
                issue=None if same else "issue 11",
                firesteel=ours,
                baseline=theirs,
                repetitions=repetitions,
                warmup=warmup,
            )
        )
    checkpoint_runs = (
        (1, 0, "next checkpoint", "full checkpoint of the same keys"),
        (10, 0, "mean of the first 10 checkpoints", "full checkpoint of the same keys"),
        (20, 10, "mean of 20 checkpoints after 10 others", "full checkpoint of the last version"),
    )
    for rounds, warmup, label, baseline_name in checkpoint_runs:
        incremental, full = _checkpoints(keys, 0.01, rounds, warmup)
        result.append(
            Workload(
                group="rocksdb",
                name=f"{label}, 1% of {keys:,} keys changed per batch",
                unit="MB uploaded",
                baseline_name=baseline_name,
                goal=0.05,
                issue="issue 11",
                firesteel=incremental,
                baseline=full,
                lower_is_better=True,
                repetitions=repetitions,
                warmup=0,
            )
        )
    restore, copy = _restore(keys)
    result.append(
        Workload(
            group="rocksdb",
            name=f"restore {keys:,} keys on a new worker",
            unit="s",
            baseline_name="shutil copy of the same files",
            goal=None,
            firesteel=restore,
            baseline=copy,
            lower_is_better=True,
            repetitions=repetitions,
            warmup=0,
        )
    )
    result.extend(
        keyed_count_workloads(
            "rocksdb",
            _DIRS,
            [(events, event_keys, files)],
            _backend,
            alternatives(
                rocksdb=True,
                goals={"applyInPandasWithState": (10.0, "issue 11"), "count": (0.5, "issue 11")},
            ),
            quick=quick,
        )
    )
    return result
