"""The state backend conformance suite: the same tests against heap, filesystem and rocksdb.

Each test drives the executor-side protocol directly (open a store for a task
of batch N, change state, snapshot), the way the operator does inside Spark,
against real files on disk: primitives, TTL, timers, restore of N-1,
rescaling, retention, corruption, inspection. Tests of one backend's own
format (the dict backends' delta files, the heap's local-only rule) say so in
their name; the RocksDB backend's own tests are in ``backends/rocksdb/tests``.

The rocksdb backend is resolved by name through the ``firesteel.backends``
entry point, as users select it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from firesteel.backends import FilesystemBackend, HeapBackend
from firesteel.backends import format as fmt
from firesteel.backends.inspect import backend_class, read_state
from firesteel.core.context import TaskScope
from firesteel.core.errors import CheckpointCorruptError, ConfigError, IncompatibleFormatError
from firesteel.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    PickleSerializer,
    StateTtl,
    ValueStateDescriptor,
)
from firesteel.state.backend import KeyedTask, OperatorSpec, StateBackend, StateDeclarations
from firesteel.state.clock import CLOCK, advance
from firesteel.state.keygroups import KeyGroupRange, operator_index

COUNT = ValueStateDescriptor("count", int)
EVENTS = ListStateDescriptor("events", str)
ATTRS = MapStateDescriptor("attrs", float)
ALL = [COUNT, EVENTS, ATTRS]
MAX_P = 16
BACKENDS = ["heap", "filesystem", "rocksdb"]


@dataclasses.dataclass
class Stats:
    count: int
    mean: float


def key_group(key: tuple[Any, ...]) -> int:
    return zlib.crc32(repr(key).encode()) % MAX_P


FOLDERS = {"heap": "heap", "filesystem": "fs", "rocksdb": "rocksdb"}


def make_backend(
    kind: str,
    root: Path,
    *,
    cache: bool = True,
    retain: int = 10,
    full_snapshot_every: int = 10,
) -> StateBackend:
    """A backend of ``kind`` under ``root``; ``full_snapshot_every`` only means something to the
    dict backends (the rocksdb backend's checkpoints are always incremental)."""
    if kind == "heap":
        return HeapBackend(
            str(root / "heap"), cache=cache, retain=retain, full_snapshot_every=full_snapshot_every
        )
    if kind == "filesystem":
        return FilesystemBackend(
            f"file://{root}/fs", cache=cache, retain=retain, full_snapshot_every=full_snapshot_every
        )
    rocksdb: Any = backend_class("rocksdb")
    return rocksdb(
        f"file://{root}/rocksdb", local_dir=str(root / "local"), cache=cache, retain=retain
    )


def operator_dir(kind: str, root: Path) -> Path:
    return root / FOLDERS[kind] / "op"


@pytest.fixture(params=BACKENDS)
def backend_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Driver:
    """Runs "tasks" of an operator the way the stateful operator does."""

    def __init__(self, backend: StateBackend, parallelism: int, descriptors: list[Any] = ALL):
        self.backend = backend
        self.spec = OperatorSpec("op", ("k",), MAX_P, parallelism)
        self.descriptors = descriptors

    def task(self, batch: int, partition: int) -> KeyedTask:
        return KeyedTask(
            TaskScope("query-1", batch, partition, 0),
            KeyGroupRange.for_partition(partition, self.spec.parallelism, MAX_P),
        )

    def batch(
        self,
        batch: int,
        keys: list[tuple[Any, ...]],
        fn: Callable[[Any, tuple[Any, ...]], None],
        now_ms: int = 1_000,
    ) -> dict[tuple[Any, ...], Any]:
        """Run every partition of ``batch``; ``fn(store, key)`` per key of the partition."""
        seen = {}
        for partition in range(self.spec.parallelism):
            task = self.task(batch, partition)
            store = self.backend.open_store(
                self.spec, task, StateDeclarations(self.descriptors), now_ms
            )
            for key in keys:
                kg = key_group(key)
                if operator_index(kg, self.spec.parallelism, MAX_P) == partition:
                    store.set_current_key(key, kg)
                    seen[key] = fn(store, key)
            store.snapshot().wait()
        return seen


def add_one(store: Any, key: tuple[Any, ...]) -> int:
    count = store.state(COUNT)
    count.update((count.value() or 0) + 1)
    store.state(EVENTS).append(f"e{count.value()}")
    store.state(ATTRS).put("last", float(count.value()))
    return int(count.value())


def read_count(store: Any, key: tuple[Any, ...]) -> Any:
    return (store.state(COUNT).value(), store.state(EVENTS).get(), store.state(ATTRS).items())


KEYS = [(f"sensor-{i}",) for i in range(40)]


# -- primitives and restore ----------------------------------------------------------------


def test_the_batch_clock_never_goes_back_across_restores_and_rescales(
    tmp_path: Path, backend_kind: str
) -> None:
    backend = make_backend(backend_kind, tmp_path, cache=False)
    # Spark's timestamps per batch: the clock set back an hour after batch 0, running on
    # for 2 s, then put right; the operator's parallelism changes (2 -> 2 -> 3 -> 1 -> 2).
    hour = 3_600_000
    runs = [(2, 10_000), (2, 10_500 - hour), (3, 12_500 - hour), (1, 13_000), (2, 14_000)]
    seen: dict[int, set[int]] = {}
    for batch, (parallelism, spark_time) in enumerate(runs):
        driver = Driver(backend, parallelism, descriptors=[*ALL, CLOCK])
        for partition in range(parallelism):
            task = driver.task(batch, partition)
            store = backend.open_store(
                driver.spec, task, StateDeclarations(driver.descriptors), spark_time
            )
            now = advance(store, task.key_groups, spark_time)
            assert store.now_ms == now
            seen.setdefault(batch, set()).add(now)
            store.snapshot().wait()
    assert seen == {0: {10_000}, 1: {10_001}, 2: {12_001}, 3: {13_000}, 4: {14_000}}
    clock_rows = read_state(backend.location, operator="op").to_pandas()
    clock_rows = clock_rows[clock_rows["kind"] == "clock"]
    assert list(clock_rows["value"]) == ["14000"] and list(clock_rows["key_group"]) == [-1]


def test_snapshot_and_restore_over_many_batches(tmp_path: Path, backend_kind: str) -> None:
    backend = make_backend(backend_kind, tmp_path, full_snapshot_every=3, cache=False)
    driver = Driver(backend, parallelism=2)
    for batch in range(7):
        driver.batch(batch, KEYS[: 10 + batch * 5], add_one)
    seen = driver.batch(7, KEYS, read_count)
    for index, key in enumerate(KEYS):
        times = sum(1 for batch in range(7) if index < 10 + batch * 5)
        assert seen[key][0] == (times or None)
        assert seen[key][1] == [f"e{i}" for i in range(1, times + 1)]
        assert seen[key][2] == ([("last", float(times))] if times else [])


@pytest.mark.parametrize("kind", ["heap", "filesystem"])
def test_dict_backends_write_full_and_delta_snapshots(tmp_path: Path, kind: str) -> None:
    backend = make_backend(kind, tmp_path, full_snapshot_every=3, cache=False)
    driver = Driver(backend, parallelism=2)
    for batch in range(4):
        driver.batch(batch, KEYS[:10], add_one)
    kinds = {p.name.split("-")[2] for p in tmp_path.rglob("*.snap")}
    assert kinds == {"full", "delta"}


def test_filesystem_list_append_delta_holds_only_new_elements(tmp_path: Path) -> None:
    backend = make_backend("filesystem", tmp_path, full_snapshot_every=100, cache=False)
    driver = Driver(backend, parallelism=1)
    key = ("k",)

    def append_many(store: Any, _: Any) -> None:
        store.state(EVENTS).extend(f"x{i}" for i in range(100))

    driver.batch(0, [key], append_many)
    driver.batch(1, [key], lambda store, _: store.state(EVENTS).append("new"))
    delta = next(tmp_path.rglob("v000000000001/*.snap"))
    rows = fmt.decode(delta.read_bytes(), str(delta)).rows
    assert rows.column("op").to_pylist() == [fmt.OP_APPEND]
    seen = driver.batch(2, [key], lambda store, _: store.state(EVENTS).get())
    assert seen[key] == [f"x{i}" for i in range(100)] + ["new"]


def test_list_update_clear_and_length(tmp_path: Path, backend_kind: str) -> None:
    driver = Driver(make_backend(backend_kind, tmp_path, cache=False), parallelism=1)
    key = ("l",)

    def edit(store: Any, _: Any) -> Any:
        events = store.state(EVENTS)
        events.extend(["a", "b"])
        events.update(["c"])
        events.append("d")
        return len(events)

    assert driver.batch(0, [key], edit)[key] == 2
    assert driver.batch(1, [key], lambda s, _: s.state(EVENTS).get())[key] == ["c", "d"]
    driver.batch(2, [key], lambda s, _: s.state(EVENTS).clear())
    assert driver.batch(3, [key], lambda s, _: len(s.state(EVENTS)))[key] == 0


def test_map_entries_put_delete_clear(tmp_path: Path, backend_kind: str) -> None:
    backend = make_backend(backend_kind, tmp_path, full_snapshot_every=10, cache=False)
    driver = Driver(backend, parallelism=1)
    key = ("m",)

    def fill(store: Any, _: Any) -> None:
        attrs = store.state(ATTRS)
        attrs.put_all({"a": 1.0, "b": 2.0, "c": 3.0})

    def edit(store: Any, _: Any) -> None:
        attrs = store.state(ATTRS)
        attrs.remove("a")
        attrs.put("d", 4.0)
        assert attrs.contains("b") and not attrs.contains("a")

    def clear_and_put(store: Any, _: Any) -> None:
        attrs = store.state(ATTRS)
        attrs.clear()
        attrs.put("z", 9.0)

    driver.batch(0, [key], fill)
    driver.batch(1, [key], edit)
    assert driver.batch(2, [key], lambda s, _: sorted(s.state(ATTRS).items()))[key] == [
        ("b", 2.0),
        ("c", 3.0),
        ("d", 4.0),
    ]
    driver.batch(3, [key], clear_and_put)
    assert driver.batch(4, [key], lambda s, _: s.state(ATTRS).items())[key] == [("z", 9.0)]


def test_ttl_entries_expire_at_once_and_are_not_restored(tmp_path: Path, backend_kind: str) -> None:
    seen_value = ValueStateDescriptor("seen", int, ttl=dt.timedelta(seconds=10))
    recent = ListStateDescriptor("recent", int, ttl=10)
    tags = MapStateDescriptor("tags", int, ttl=10)
    backend = make_backend(backend_kind, tmp_path, cache=False)
    driver = Driver(backend, parallelism=1, descriptors=[seen_value, recent, tags])
    key = ("t",)

    def write(store: Any, _: Any) -> None:
        store.state(seen_value).update(1)
        store.state(recent).append(1)
        store.state(tags).put("x", 1)

    def read(store: Any, _: Any) -> Any:
        return (
            store.state(seen_value).value(),
            store.state(recent).get(),
            store.state(tags).items(),
        )

    driver.batch(0, [key], write, now_ms=0)
    assert driver.batch(1, [key], read, now_ms=9_999)[key] == (1, [1], [("x", 1)])
    assert driver.batch(2, [key], read, now_ms=10_000)[key] == (None, [], [])
    driver.batch(3, [key], lambda s, _: None, now_ms=10_001)
    assert driver.batch(4, [key], read, now_ms=0)[key] == (None, [], [])


def test_ttl_refresh_on_read_extends_life(tmp_path: Path, backend_kind: str) -> None:
    touched = ValueStateDescriptor("touched", int, ttl=dt.timedelta(seconds=10))
    refreshed = ValueStateDescriptor(
        "refreshed", int, ttl=StateTtl(dt.timedelta(seconds=10), refresh_on_read=True)
    )
    driver = Driver(make_backend(backend_kind, tmp_path, cache=False), 1, [touched, refreshed])
    key = ("r",)

    def write(store: Any, _: Any) -> None:
        store.state(touched).update(1)
        store.state(refreshed).update(1)

    def read(store: Any, _: Any) -> Any:
        return store.state(touched).value(), store.state(refreshed).value()

    driver.batch(0, [key], write, now_ms=0)
    assert driver.batch(1, [key], read, now_ms=8_000)[key] == (1, 1)
    assert driver.batch(2, [key], read, now_ms=12_000)[key] == (None, 1)


def test_restore_takes_version_before_the_batch_not_a_failed_attempt(
    tmp_path: Path, backend_kind: str
) -> None:
    backend = make_backend(backend_kind, tmp_path, cache=False)
    driver = Driver(backend, parallelism=1)
    key = ("k",)
    driver.batch(0, [key], add_one)
    driver.batch(1, [key], add_one)
    # batch 2 runs, snapshots, but never commits (the job dies); the re-run must see batch 1.
    driver.batch(2, [key], lambda s, _: s.state(COUNT).update(1000))
    assert driver.batch(2, [key], read_count)[key][0] == 2
    assert driver.batch(3, [key], read_count)[key][0] == 2


def test_a_cached_store_restores_when_the_failed_attempt_wrote_the_next_version(
    tmp_path: Path, backend_kind: str
) -> None:
    backend = make_backend(backend_kind, tmp_path, cache=True)
    driver = Driver(backend, parallelism=1)
    key = ("k",)
    driver.batch(0, [key], add_one)
    driver.batch(1, [key], lambda s, _: s.state(COUNT).update(1000))  # never commits
    assert driver.batch(1, [key], read_count)[key][0] == 1
    assert driver.batch(2, [key], read_count)[key][0] == 1


def test_worker_memory_is_not_trusted_after_another_attempt_rewrote_the_version(
    tmp_path: Path, backend_kind: str
) -> None:
    backend: Any = make_backend(backend_kind, tmp_path, retain=5, full_snapshot_every=5)
    spec = OperatorSpec("op", ("k",), MAX_P, 1)
    key, kg = ("k",), key_group(("k",))
    task = KeyedTask(TaskScope("q", 0, 0, 0), KeyGroupRange(0, MAX_P - 1))
    # Two "Python workers": a store each, kept between tasks.
    worker_a, worker_b = backend.new_store(spec, task), backend.new_store(spec, task)
    for worker, value in ((worker_a, 1), (worker_b, 2)):  # two attempts of batch 0
        worker.begin(task, StateDeclarations(ALL), 0)
        worker.set_current_key(key, kg)
        worker.state(COUNT).update(value)
        worker.snapshot().wait()
    worker_a.begin(
        KeyedTask(TaskScope("q", 1, 0, 0), KeyGroupRange(0, MAX_P - 1)), StateDeclarations(ALL), 0
    )
    worker_a.set_current_key(key, kg)
    assert worker_a.state(COUNT).value() == 2


def test_failed_task_changes_are_discarded(tmp_path: Path, backend_kind: str) -> None:
    backend = make_backend(backend_kind, tmp_path)
    driver = Driver(backend, parallelism=1)
    key = ("k",)
    driver.batch(0, [key], add_one)
    task = driver.task(1, 0)
    store = backend.open_store(driver.spec, task, StateDeclarations(ALL), 0)
    store.set_current_key(key, key_group(key))
    store.state(COUNT).update(99)
    store.state(EVENTS).append("lost")
    store.discard()
    assert driver.batch(1, [key], read_count)[key][:2] == (1, ["e1"])


@pytest.mark.parametrize(("before", "after"), [(4, 2), (2, 3), (1, 16), (16, 1)])
def test_rescaling_keeps_every_key(
    tmp_path: Path, backend_kind: str, before: int, after: int
) -> None:
    backend = make_backend(backend_kind, tmp_path, full_snapshot_every=2, cache=False)
    Driver(backend, parallelism=before).batch(0, KEYS, add_one)
    Driver(backend, parallelism=before).batch(1, KEYS[:20], add_one)
    rescaled = Driver(backend, parallelism=after)
    rescaled.batch(2, KEYS[10:30], add_one)
    seen = rescaled.batch(3, KEYS, read_count)
    for index, key in enumerate(KEYS):
        expected = 1 + (index < 20) + (10 <= index < 30)
        assert seen[key][0] == expected, key
        assert seen[key][1] == [f"e{i}" for i in range(1, expected + 1)], key


def _versions(kind: str, root: Path) -> list[int]:
    return sorted(int(p.name[1:]) for p in operator_dir(kind, root).glob("v*"))


def _referenced_files(root: Path) -> set[str]:
    base = operator_dir("rocksdb", root)
    return {
        entry["path"]
        for manifest in base.glob("v*/*.json")
        for entry in json.loads(manifest.read_text())["content"]["files"]
        if entry["path"].startswith("shared/")
    }


def test_retention_keeps_what_restore_needs(tmp_path: Path, backend_kind: str) -> None:
    backend = make_backend(backend_kind, tmp_path, retain=2, full_snapshot_every=3, cache=False)
    driver = Driver(backend, parallelism=2)
    for batch in range(12):
        driver.batch(batch, KEYS[:5], add_one)
    versions = _versions(backend_kind, tmp_path)
    # dict backends keep the full snapshot retained deltas build on; rocksdb versions stand alone
    assert versions[0] >= (9 if backend_kind == "rocksdb" else 6) and versions[-1] == 11
    if backend_kind == "rocksdb":
        shared = operator_dir("rocksdb", tmp_path) / "shared"
        stored = {f"shared/{p.name}" for p in shared.iterdir()}
        assert _referenced_files(tmp_path) <= stored
        assert all(int(name[7:19]) >= 9 for name in stored - _referenced_files(tmp_path))
    assert driver.batch(12, KEYS[:5], read_count)[KEYS[0]][0] == 12


# -- corruption ----------------------------------------------------------------------------


def _latest_manifest(root: Path) -> Path:
    return sorted(operator_dir("rocksdb", root).glob("v*/*.json"))[-1]


def _latest_data_file(kind: str, root: Path) -> Path:
    """The file the latest version's state is read from: a snapshot file, or an SST file."""
    if kind != "rocksdb":
        latest = sorted(operator_dir(kind, root).glob("v*"))[-1]
        return sorted(latest.glob("*.snap"))[0]
    content = json.loads(_latest_manifest(root).read_text())["content"]
    newest = max(f["path"] for f in content["files"] if f["path"].startswith("shared/"))
    return operator_dir(kind, root) / newest


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-7])


@pytest.mark.parametrize("damage", [_flip, _truncate], ids=["flipped-byte", "truncated"])
def test_corrupt_snapshot_is_reported_with_its_file(
    tmp_path: Path, backend_kind: str, damage: Any
) -> None:
    backend = make_backend(backend_kind, tmp_path, cache=False)
    driver = Driver(backend, parallelism=1)
    driver.batch(0, KEYS, add_one)
    driver.batch(1, KEYS, add_one)
    damaged = _latest_data_file(backend_kind, tmp_path)
    damage(damaged)
    with pytest.raises(CheckpointCorruptError, match=damaged.name):
        driver.batch(2, KEYS, read_count)


def test_header_damage_is_detected(tmp_path: Path, backend_kind: str) -> None:
    backend = make_backend(backend_kind, tmp_path, cache=False)
    driver = Driver(backend, parallelism=1)
    driver.batch(0, KEYS, add_one)
    if backend_kind == "rocksdb":
        damaged = _latest_manifest(tmp_path)
        damaged.write_text(damaged.read_text().replace('"count"', '"coumt"', 1))
    else:
        damaged = _latest_data_file(backend_kind, tmp_path)
        data = bytearray(damaged.read_bytes())
        data[20] ^= 0x01
        damaged.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorruptError, match=damaged.name):
        driver.batch(1, KEYS, read_count)


def test_missing_snapshot_is_reported(tmp_path: Path, backend_kind: str) -> None:
    backend = make_backend(backend_kind, tmp_path, full_snapshot_every=10, cache=False)
    driver = Driver(backend, parallelism=1)
    for batch in range(3):
        driver.batch(batch, KEYS, add_one)
    base = operator_dir(backend_kind, tmp_path)
    # What restoring version 2 needs besides its own file: an older delta, or a shared SST.
    if backend_kind == "rocksdb":
        needed = _latest_data_file(backend_kind, tmp_path)
    else:
        needed = next((base / "v000000000001").glob("*.snap"))
    needed.unlink()
    with pytest.raises(CheckpointCorruptError, match=needed.name):
        driver.batch(3, KEYS, read_count)
    for latest in (base / "v000000000002").glob("*.*"):
        latest.unlink()
    with pytest.raises(CheckpointCorruptError, match="v000000000002"):
        driver.batch(3, KEYS, read_count)


def test_incompatible_format_version(tmp_path: Path, backend_kind: str) -> None:
    backend = make_backend(backend_kind, tmp_path, cache=False)
    driver = Driver(backend, parallelism=1)
    driver.batch(0, KEYS, add_one)
    if backend_kind == "rocksdb":
        damaged = _latest_manifest(tmp_path)
        body = json.loads(damaged.read_text())
        damaged.write_text(json.dumps(dict(body, version=2)))
    else:
        damaged = _latest_data_file(backend_kind, tmp_path)
        data = bytearray(damaged.read_bytes())
        data[8:10] = (fmt.FORMAT_VERSION + 1).to_bytes(2, "little")
        damaged.write_bytes(bytes(data))
    with pytest.raises(IncompatibleFormatError, match=f"{damaged.name}.*format version 2"):
        driver.batch(1, KEYS, read_count)


@pytest.mark.parametrize("writer", ["filesystem", "rocksdb"])
def test_a_checkpoint_of_another_backend_is_refused(tmp_path: Path, writer: str) -> None:
    written = make_backend(writer, tmp_path)
    Driver(written, 1).batch(0, KEYS[:3], add_one)
    reader_kind = "filesystem" if writer == "rocksdb" else "rocksdb"
    reader: Any = make_backend(reader_kind, tmp_path)
    reader = dataclasses.replace(reader, path=written.location)
    with pytest.raises((ConfigError, CheckpointCorruptError), match=r"_operator\.json|missing"):
        Driver(reader, 1).batch(1, KEYS[:3], read_count)


# -- serialization, declarations, ownership ------------------------------------------------


def test_pickle_only_by_opt_in(tmp_path: Path, backend_kind: str) -> None:
    pickled = ValueStateDescriptor("blob", serializer=PickleSerializer())
    backend = make_backend(backend_kind, tmp_path, cache=False)
    Driver(backend, 1, [pickled]).batch(0, [("k",)], lambda s, _: s.state(pickled).update({1, 2}))
    plain = ValueStateDescriptor("blob")
    with pytest.raises(ConfigError, match="pickle"):
        Driver(backend, 1, [plain]).batch(1, [("k",)], lambda s, _: None)
    seen = Driver(backend, 1, [pickled]).batch(1, [("k",)], lambda s, _: s.state(pickled).value())
    assert seen[("k",)] == {1, 2}


def test_msgpack_values_round_trip(tmp_path: Path, backend_kind: str) -> None:
    stats = ValueStateDescriptor("stats", Stats)
    when = ValueStateDescriptor("when")
    backend = make_backend(backend_kind, tmp_path, cache=False)
    driver = Driver(backend, 1, [stats, when])
    key = (dt.datetime(2024, 1, 2, 3, 4, 5), 7)
    moment = dt.datetime(2024, 5, 6, tzinfo=dt.timezone.utc)

    def write(store: Any, _: Any) -> None:
        store.state(stats).update(Stats(3, 1.5))
        store.state(when).update(moment)

    driver.batch(0, [key], write)
    seen = driver.batch(1, [key], lambda s, _: (s.state(stats).value(), s.state(when).value()))
    assert seen[key] == (Stats(3, 1.5), moment)


def test_state_type_is_checked() -> None:
    with pytest.raises(TypeError, match="state 'count' holds int values, got str"):
        COUNT.check_type("nope")


def test_undeclared_state_in_snapshot_is_refused_unless_dropped(
    tmp_path: Path, backend_kind: str
) -> None:
    backend = make_backend(backend_kind, tmp_path, cache=False)
    Driver(backend, 1).batch(0, [("k",)], add_one)
    driver = Driver(backend, 1, descriptors=[COUNT])
    with pytest.raises(ConfigError, match=r"ctx.drop_state\('(events|attrs)'\)"):
        driver.batch(1, [("k",)], read_count)
    task = driver.task(1, 0)
    store = backend.open_store(
        driver.spec, task, StateDeclarations([COUNT], ["events", "attrs"]), 0
    )
    store.set_current_key(("k",), key_group(("k",)))
    assert store.state(COUNT).value() == 1


def test_a_worker_keeps_its_store_between_tasks_until_max_parallelism_changes(
    tmp_path: Path, backend_kind: str
) -> None:
    """One rule on every backend (``TaskStoreBackend.task_store``): the kept store serves the
    next task and takes its spec; one made for another max_parallelism is replaced."""
    backend: Any = make_backend(backend_kind, tmp_path, cache=True)
    task = KeyedTask(TaskScope("q", 0, 0, 0), KeyGroupRange(0, MAX_P - 1))
    kept = backend.task_store(OperatorSpec("op", ("k",), MAX_P, 1), task)
    rescaled = OperatorSpec("op", ("k",), MAX_P, 2)
    assert backend.task_store(rescaled, task) is kept
    assert kept.spec == rescaled
    regrouped = OperatorSpec("op", ("k",), MAX_P * 2, 2)
    replaced = backend.task_store(regrouped, task)
    assert replaced is not kept
    assert replaced.spec == regrouped


def test_a_store_whose_begin_failed_is_discarded(tmp_path: Path, backend_kind: str) -> None:
    """One decision on every backend (``TaskStore.open_task``): a failed ``begin`` discards
    the worker's store, and the next task restores the committed state."""
    backend = make_backend(backend_kind, tmp_path, cache=True)
    driver = Driver(backend, 1)
    kept: Any = backend.open_store(driver.spec, driver.task(0, 0), StateDeclarations(ALL), 0)
    kept.set_current_key(("k",), key_group(("k",)))
    add_one(kept, ("k",))
    kept.snapshot().wait()
    with pytest.raises(ConfigError, match=r"ctx.drop_state"):
        backend.open_store(driver.spec, driver.task(1, 0), StateDeclarations([COUNT]), 0)
    with pytest.raises(RuntimeError, match="outside a task"):
        _ = kept.task
    assert driver.batch(1, [("k",)], read_count)[("k",)][0] == 1


def test_state_belongs_to_one_query(tmp_path: Path, backend_kind: str) -> None:
    backend = make_backend(backend_kind, tmp_path, cache=False)
    driver = Driver(backend, 1)
    driver.batch(0, [("k",)], add_one)
    other = KeyedTask(TaskScope("another-query", 1, 0, 0), KeyGroupRange(0, MAX_P - 1))
    with pytest.raises(ConfigError, match="belongs to Spark query query-1"):
        backend.open_store(driver.spec, other, StateDeclarations(ALL), 0)


# -- timers --------------------------------------------------------------------------------


def test_timers_are_snapshotted_and_fire_once(tmp_path: Path, backend_kind: str) -> None:
    backend = make_backend(backend_kind, tmp_path, cache=False)
    driver = Driver(backend, parallelism=2)

    def arm(store: Any, key: tuple[Any, ...]) -> None:
        store.register_timer(5_000 + int(key[0].split("-")[1]))

    driver.batch(0, KEYS[:4], arm, now_ms=0)
    fired = []
    for batch, now in ((1, 4_000), (2, 5_002), (3, 9_000)):
        for partition in range(2):
            store = backend.open_store(
                driver.spec, driver.task(batch, partition), StateDeclarations(ALL), now
            )
            fired.extend((batch, ts) for ts, _, _ in store.pop_due_timers(now))
            store.snapshot().wait()
    assert sorted(fired) == [(2, 5_000), (2, 5_001), (2, 5_002), (3, 5_003)]


def test_timers_of_a_key_are_idempotent_and_deletable(tmp_path: Path, backend_kind: str) -> None:
    driver = Driver(make_backend(backend_kind, tmp_path, cache=False), parallelism=1)
    key = ("sensor-1",)

    def arm(store: Any, _: Any) -> Any:
        for stamp in (30, 10, 20, 10):
            store.register_timer(stamp)
        store.delete_timer(20)
        store.delete_timer(99)
        return store.timers()

    assert driver.batch(0, [key], arm)[key] == [10, 30]
    assert driver.batch(1, [key], lambda s, _: s.timers())[key] == [10, 30]


# -- inspection ----------------------------------------------------------------------------


def test_inspection_reads_a_checkpoint(tmp_path: Path, backend_kind: str) -> None:
    backend = make_backend(backend_kind, tmp_path)
    driver = Driver(backend, parallelism=2)
    driver.batch(0, KEYS[:3], add_one)
    driver.batch(1, KEYS[:2], add_one)
    location = backend.location
    frame = read_state(location).to_pandas()
    assert set(frame["operator"]) == {"op"} and set(frame["batch"]) == {1}
    counts = frame[frame["state"] == "count"].set_index("key")["value"].to_dict()
    assert counts == {'["sensor-0"]': "2", '["sensor-1"]': "2", '["sensor-2"]': "1"}
    events = frame[(frame["state"] == "events") & (frame["key"] == '["sensor-0"]')]
    assert list(events["value"]) == ['"e1"', '"e2"']
    older = read_state(location, operator="op", batch=0).to_pandas()
    assert set(older[older["state"] == "count"]["value"]) == {"1"}


def test_heap_backend_refuses_remote_storage() -> None:
    with pytest.raises(ConfigError, match="local disk only"):
        HeapBackend("s3://bucket/state")


def test_backends_are_found_by_name() -> None:
    from firesteel.rocksdb import RocksDBBackend

    assert backend_class("rocksdb") is RocksDBBackend
    assert backend_class("filesystem") is FilesystemBackend
    with pytest.raises(ConfigError, match=r"unknown state backend 'leveldb'.*rocksdb"):
        backend_class("leveldb")


def test_state_command_prints_a_checkpoint(
    tmp_path: Path, backend_kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from firesteel.cli.main import main

    backend = make_backend(backend_kind, tmp_path)
    Driver(backend, parallelism=2).batch(0, KEYS[:3], add_one)
    assert main(["state", backend.location, "--operator", "op"]) == 0
    printed = capsys.readouterr().out
    assert '["sensor-2"]' in printed and "(9 entries)" in printed
