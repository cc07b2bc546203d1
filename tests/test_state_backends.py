"""State backends without Spark: primitives, TTL, snapshots, restore, rescaling, corruption.

Each test drives the executor-side protocol directly (open a store for a task
of batch N, change state, snapshot), the way the operator does inside Spark,
against real files on disk, for both backends.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from firesteel.backends import FilesystemBackend, HeapBackend
from firesteel.backends import format as fmt
from firesteel.backends.dictstore import DictKeyedStore
from firesteel.backends.inspect import read_state
from firesteel.core.errors import CheckpointCorruptError, ConfigError, IncompatibleFormatError
from firesteel.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    PickleSerializer,
    ValueStateDescriptor,
)
from firesteel.state.backend import OperatorSpec, StateBackend, TaskInfo
from firesteel.state.keygroups import KeyGroupRange, operator_index

COUNT = ValueStateDescriptor("count", int)
EVENTS = ListStateDescriptor("events", str)
ATTRS = MapStateDescriptor("attrs", float)
ALL = [COUNT, EVENTS, ATTRS]
MAX_P = 16


@dataclasses.dataclass
class Stats:
    count: int
    mean: float


def key_group(key: tuple[Any, ...]) -> int:
    return zlib.crc32(repr(key).encode()) % MAX_P


def make_backend(kind: str, root: Path, **options: Any) -> StateBackend:
    if kind == "heap":
        return HeapBackend(str(root / "heap"), **options)
    return FilesystemBackend(f"file://{root}/fs", **options)


@pytest.fixture(params=["heap", "filesystem"])
def backend_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Driver:
    """Runs "tasks" of an operator the way the stateful operator does."""

    def __init__(self, backend: StateBackend, parallelism: int, descriptors: list[Any] = ALL):
        self.backend = backend
        self.spec = OperatorSpec("op", ("k",), MAX_P, parallelism)
        self.descriptors = descriptors

    def task(self, batch: int, partition: int) -> TaskInfo:
        return TaskInfo(
            "query-1",
            batch,
            partition,
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
            store = self.backend.open_store(self.spec, task, self.descriptors, [], now_ms)
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


def test_snapshot_restore_full_and_delta(tmp_path: Path, backend_kind: str) -> None:
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
    kinds = {p.name.split("-")[2] for p in (tmp_path).rglob("*.snap")}
    assert kinds == {"full", "delta"}


def test_list_append_delta_holds_only_new_elements(tmp_path: Path) -> None:
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


def test_restore_takes_version_before_the_batch_not_a_failed_attempt(tmp_path: Path) -> None:
    backend = make_backend("filesystem", tmp_path, cache=False)
    driver = Driver(backend, parallelism=1)
    key = ("k",)
    driver.batch(0, [key], add_one)
    driver.batch(1, [key], add_one)
    # batch 2 runs, snapshots, but never commits (the job dies); the re-run must see batch 1.
    driver.batch(2, [key], lambda s, _: s.state(COUNT).update(1000))
    assert driver.batch(2, [key], read_count)[key][0] == 2
    assert driver.batch(3, [key], read_count)[key][0] == 2


def test_worker_memory_is_not_trusted_after_another_attempt_rewrote_the_version(
    tmp_path: Path,
) -> None:
    backend = make_backend("filesystem", tmp_path)
    spec = OperatorSpec("op", ("k",), MAX_P, 1)
    worker_a = DictKeyedStore(backend.storage("op"), spec, retain=5, full_snapshot_every=5)
    worker_b = DictKeyedStore(backend.storage("op"), spec, retain=5, full_snapshot_every=5)
    key, kg = ("k",), key_group(("k",))
    task = TaskInfo("q", 0, 0, KeyGroupRange(0, MAX_P - 1))
    for worker, value in ((worker_a, 1), (worker_b, 2)):  # two attempts of batch 0
        worker.begin(task, ALL, [], 0)
        worker.set_current_key(key, kg)
        worker.state(COUNT).update(value)
        worker.snapshot().wait()
    worker_a.begin(TaskInfo("q", 1, 0, KeyGroupRange(0, MAX_P - 1)), ALL, [], 0)
    worker_a.set_current_key(key, kg)
    assert worker_a.state(COUNT).value() == 2


def test_failed_task_changes_are_discarded(tmp_path: Path) -> None:
    backend = make_backend("filesystem", tmp_path)
    driver = Driver(backend, parallelism=1)
    key = ("k",)
    driver.batch(0, [key], add_one)
    task = driver.task(1, 0)
    store = backend.open_store(driver.spec, task, ALL, [], 0)
    store.set_current_key(key, key_group(key))
    store.state(COUNT).update(99)
    store.discard()
    assert driver.batch(1, [key], read_count)[key][0] == 1


@pytest.mark.parametrize(("before", "after"), [(4, 2), (2, 3), (1, 16), (16, 1)])
def test_rescaling_keeps_every_key(tmp_path: Path, before: int, after: int) -> None:
    backend = make_backend("filesystem", tmp_path, full_snapshot_every=2, cache=False)
    Driver(backend, parallelism=before).batch(0, KEYS, add_one)
    Driver(backend, parallelism=before).batch(1, KEYS[:20], add_one)
    rescaled = Driver(backend, parallelism=after)
    rescaled.batch(2, KEYS[10:30], add_one)
    seen = rescaled.batch(3, KEYS, read_count)
    for index, key in enumerate(KEYS):
        expected = 1 + (index < 20) + (10 <= index < 30)
        assert seen[key][0] == expected, key


def test_retention_keeps_what_restore_needs(tmp_path: Path) -> None:
    backend = make_backend("filesystem", tmp_path, retain=2, full_snapshot_every=3, cache=False)
    driver = Driver(backend, parallelism=2)
    for batch in range(12):
        driver.batch(batch, KEYS[:5], add_one)
    versions = sorted(int(p.name[1:]) for p in (tmp_path / "fs" / "op").glob("v*"))
    assert versions[0] >= 6 and versions[-1] == 11
    assert driver.batch(12, KEYS[:5], read_count)[KEYS[0]][0] == 12


def _corrupt_latest(root: Path, damage: Callable[[Path], None]) -> Path:
    latest = sorted((root / "fs" / "op").glob("v*"))[-1]
    target = sorted(latest.glob("*.snap"))[0]
    damage(target)
    return target


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-7])


@pytest.mark.parametrize("damage", [_flip, _truncate], ids=["flipped-byte", "truncated"])
def test_corrupt_snapshot_is_reported_with_its_file(tmp_path: Path, damage: Any) -> None:
    backend = make_backend("filesystem", tmp_path, cache=False)
    driver = Driver(backend, parallelism=1)
    driver.batch(0, KEYS, add_one)
    driver.batch(1, KEYS, add_one)
    damaged = _corrupt_latest(tmp_path, damage)
    with pytest.raises(CheckpointCorruptError, match=damaged.name):
        driver.batch(2, KEYS, read_count)


def test_header_damage_is_detected(tmp_path: Path) -> None:
    backend = make_backend("filesystem", tmp_path, cache=False)
    driver = Driver(backend, parallelism=1)
    driver.batch(0, KEYS, add_one)

    def flip_header(path: Path) -> None:
        data = bytearray(path.read_bytes())
        data[20] ^= 0x01
        path.write_bytes(bytes(data))

    damaged = _corrupt_latest(tmp_path, flip_header)
    with pytest.raises(CheckpointCorruptError, match=damaged.name):
        driver.batch(1, KEYS, read_count)


def test_missing_snapshot_is_reported(tmp_path: Path) -> None:
    backend = make_backend("filesystem", tmp_path, full_snapshot_every=10, cache=False)
    driver = Driver(backend, parallelism=1)
    for batch in range(3):
        driver.batch(batch, KEYS, add_one)
    middle = next((tmp_path / "fs" / "op" / "v000000000001").glob("*.snap"))
    middle.unlink()
    with pytest.raises(CheckpointCorruptError, match=middle.name):
        driver.batch(3, KEYS, read_count)
    latest = next((tmp_path / "fs" / "op" / "v000000000002").glob("*.snap"))
    latest.unlink()
    with pytest.raises(CheckpointCorruptError, match="v000000000002"):
        driver.batch(3, KEYS, read_count)


def test_incompatible_format_version(tmp_path: Path) -> None:
    backend = make_backend("filesystem", tmp_path, cache=False)
    driver = Driver(backend, parallelism=1)
    driver.batch(0, KEYS, add_one)

    def future_version(path: Path) -> None:
        data = bytearray(path.read_bytes())
        data[8:10] = (fmt.FORMAT_VERSION + 1).to_bytes(2, "little")
        path.write_bytes(bytes(data))

    damaged = _corrupt_latest(tmp_path, future_version)
    with pytest.raises(IncompatibleFormatError, match=f"{damaged.name}.*format version 2"):
        driver.batch(1, KEYS, read_count)


def test_pickle_only_by_opt_in(tmp_path: Path) -> None:
    pickled = ValueStateDescriptor("blob", serializer=PickleSerializer())
    backend = make_backend("filesystem", tmp_path, cache=False)
    Driver(backend, 1, [pickled]).batch(0, [("k",)], lambda s, _: s.state(pickled).update({1, 2}))
    plain = ValueStateDescriptor("blob")
    with pytest.raises(ConfigError, match="pickle"):
        Driver(backend, 1, [plain]).batch(1, [("k",)], lambda s, _: None)
    seen = Driver(backend, 1, [pickled]).batch(1, [("k",)], lambda s, _: s.state(pickled).value())
    assert seen[("k",)] == {1, 2}


def test_msgpack_values_round_trip(tmp_path: Path) -> None:
    stats = ValueStateDescriptor("stats", Stats)
    when = ValueStateDescriptor("when")
    backend = make_backend("filesystem", tmp_path, cache=False)
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


def test_undeclared_state_in_snapshot_is_refused_unless_dropped(tmp_path: Path) -> None:
    backend = make_backend("filesystem", tmp_path, cache=False)
    Driver(backend, 1).batch(0, [("k",)], add_one)
    driver = Driver(backend, 1, descriptors=[COUNT])
    with pytest.raises(ConfigError, match=r"ctx.drop_state\('(events|attrs)'\)"):
        driver.batch(1, [("k",)], read_count)
    task = driver.task(1, 0)
    store = backend.open_store(driver.spec, task, [COUNT], ["events", "attrs"], 0)
    store.set_current_key(("k",), key_group(("k",)))
    assert store.state(COUNT).value() == 1


def test_state_belongs_to_one_query(tmp_path: Path) -> None:
    backend = make_backend("filesystem", tmp_path, cache=False)
    driver = Driver(backend, 1)
    driver.batch(0, [("k",)], add_one)
    other = TaskInfo("another-query", 1, 0, KeyGroupRange(0, MAX_P - 1))
    with pytest.raises(ConfigError, match="belongs to query query-1"):
        backend.open_store(driver.spec, other, ALL, [], 0)


def test_timers_are_snapshotted_and_fire_once(tmp_path: Path) -> None:
    backend = make_backend("filesystem", tmp_path, cache=False)
    driver = Driver(backend, parallelism=2)

    def arm(store: Any, key: tuple[Any, ...]) -> None:
        store.register_timer(5_000 + int(key[0].split("-")[1]))

    driver.batch(0, KEYS[:4], arm, now_ms=0)
    fired = []
    for batch, now in ((1, 4_000), (2, 5_002), (3, 9_000)):
        for partition in range(2):
            store = backend.open_store(driver.spec, driver.task(batch, partition), ALL, [], now)
            fired.extend((batch, ts) for ts, _, _ in store.pop_due_timers(now))
            store.snapshot().wait()
    assert sorted(fired) == [(2, 5_000), (2, 5_001), (2, 5_002), (3, 5_003)]


def test_inspection_reads_a_checkpoint(tmp_path: Path) -> None:
    backend = make_backend("filesystem", tmp_path)
    driver = Driver(backend, parallelism=2)
    driver.batch(0, KEYS[:3], add_one)
    driver.batch(1, KEYS[:2], add_one)
    table = read_state(f"file://{tmp_path}/fs")
    frame = table.to_pandas()
    assert set(frame["operator"]) == {"op"} and set(frame["batch"]) == {1}
    counts = frame[frame["state"] == "count"].set_index("key")["value"].to_dict()
    assert counts == {'["sensor-0"]': "2", '["sensor-1"]': "2", '["sensor-2"]': "1"}
    events = frame[(frame["state"] == "events") & (frame["key"] == '["sensor-0"]')]
    assert list(events["value"]) == ['"e1"', '"e2"']
    older = read_state(f"file://{tmp_path}/fs", operator="op", batch=0).to_pandas()
    assert set(older[older["state"] == "count"]["value"]) == {"1"}


def test_heap_backend_refuses_remote_storage() -> None:
    with pytest.raises(ConfigError, match="local disk only"):
        HeapBackend("s3://bucket/state")


def test_state_command_prints_a_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from firesteel.cli.main import main

    backend = make_backend("filesystem", tmp_path)
    Driver(backend, parallelism=2).batch(0, KEYS[:3], add_one)
    assert main(["state", f"file://{tmp_path}/fs", "--operator", "op"]) == 0
    printed = capsys.readouterr().out
    assert '["sensor-2"]' in printed and "(9 entries)" in printed
