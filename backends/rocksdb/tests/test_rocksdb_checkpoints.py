"""Incremental checkpoints: what is uploaded, reused, downloaded and deleted, and what never is.

The cases Flink and Spark's RocksDB providers got wrong first (FLINK-25395,
SPARK-43404, SPARK-45419, SPARK-51714) come first: a retried or zombie
attempt's files are never reused or overwritten, and a worker's instance is
trusted only when the committed manifest is the one it wrote.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from rocksdb_helpers import (
    ALL,
    ATTRS,
    COUNT,
    EVENTS,
    EVERYTHING,
    MAX_P,
    backend,
    manifests,
    read,
    run,
    shared_paths,
    stored_shared,
    worker,
)

from firesteel.core.context import TaskScope
from firesteel.core.errors import CheckpointCorruptError
from firesteel.rocksdb import RocksDBOptions
from firesteel.rocksdb.keys import key_group_of, key_group_prefix, state_id
from firesteel.rocksdb.options import Compaction, MiB
from firesteel.rocksdb.store import SWEEP_ROUNDS
from firesteel.state import ValueStateDescriptor
from firesteel.state.backend import KeyedTask, StateDeclarations

MANY = {index: 1 for index in range(5_000)}
FEW = {index: 2 for index in range(0, 5_000, 100)}


def test_a_retried_attempt_never_reuses_or_overwrites_the_failed_attempts_files(
    tmp_path: Path,
) -> None:
    chosen = backend(tmp_path)
    run(worker(tmp_path, "first", chosen), 0, MANY)
    store = run(worker(tmp_path, "w", chosen), 1, dict.fromkeys(FEW, 9))  # never commits
    [failed] = manifests(tmp_path, 1)
    failed_files = shared_paths(failed) - shared_paths(manifests(tmp_path, 0)[0])
    assert failed_files
    # The retry restores version 0 again: RocksDB numbers its files as the failed attempt
    # did, so its new SST has the same local name and size, but other content.
    retried = run(store, 1, FEW)
    [content] = manifests(tmp_path, 1)
    assert {f["local"] for f in content["files"]} == {f["local"] for f in failed["files"]}
    assert not failed_files & shared_paths(content), "a failed attempt's upload was reused"
    assert failed_files <= stored_shared(tmp_path), "an upload was overwritten or deleted early"
    assert read(retried, 2, range(101)) == {i: (2 if i % 100 == 0 else 1) for i in range(101)}


def test_a_worker_trusts_its_instance_only_if_its_manifest_is_the_committed_one(
    tmp_path: Path,
) -> None:
    chosen = backend(tmp_path)
    worker_a, worker_b = worker(tmp_path, "a", chosen), worker(tmp_path, "b", chosen)
    run(worker_a, 0, MANY)
    run(worker_a, 1, FEW)  # attempt 1 of batch 1 ...
    run(worker_b, 1, {0: 7})  # ... and the retry on another worker, which committed
    assert read(worker_a, 2, range(2)) == {0: 7, 1: 1}
    assert worker_a.downloads > 0


def test_a_zombie_manifest_written_after_the_retry_is_reported(tmp_path: Path) -> None:
    chosen = backend(tmp_path)
    store = run(worker(tmp_path, "w", chosen), 0, MANY)
    run(store, 1, FEW)
    zombie = next((tmp_path / "ck" / "op" / "v000000000001").glob("*.json"))
    kept = tmp_path / zombie.name
    shutil.copy(zombie, kept)
    run(store, 1, FEW)  # the retry removes the first attempt's manifest ...
    shutil.copy(kept, zombie)  # ... which a zombie then writes again
    with pytest.raises(CheckpointCorruptError, match=f"several manifests.*{zombie.name}"):
        read(worker(tmp_path, "fresh", chosen), 2, range(1))


def test_two_attempts_finishing_together_never_remove_each_others_manifest(
    tmp_path: Path,
) -> None:
    chosen = backend(tmp_path)
    run(worker(tmp_path, "first", chosen), 0, MANY)
    slow = run(worker(tmp_path, "slow", chosen), 1, FEW)
    fast = run(worker(tmp_path, "fast", chosen), 1, {0: 5})
    assert slow.base is not None and fast.base is not None
    # Both manifests present at once, the slow attempt's older: as when both attempts
    # wrote before either listed the folder.
    older = tmp_path / "ck" / "op" / slow.base.manifest.relative_path
    older.write_bytes(slow.base.manifest.encode())
    newer = tmp_path / "ck" / "op" / fast.base.manifest.relative_path
    os.utime(older, ns=(newer.stat().st_mtime_ns - 10**9,) * 2)
    storage = chosen.storage("op")
    storage.remove_stale(slow.base.manifest)
    assert older.exists() and newer.exists(), "an attempt removed a newer attempt's manifest"
    storage.remove_stale(fast.base.manifest)
    assert newer.exists() and not older.exists()
    assert read(worker(tmp_path, "reader", chosen), 2, range(2)) == {0: 5, 1: 1}


def test_a_retry_dated_to_the_same_second_still_removes_the_failed_attempts_manifest(
    tmp_path: Path,
) -> None:
    """Object stores date objects to the second: a killed attempt and its retry often share
    one, and then the manifests' own write times say which came first."""
    chosen = backend(tmp_path)
    run(worker(tmp_path, "first", chosen), 0, MANY)
    failed = run(worker(tmp_path, "failed", chosen), 1, FEW)
    retry = run(worker(tmp_path, "retry", chosen), 1, {0: 5})
    assert failed.base is not None and retry.base is not None
    assert failed.base.manifest.written_ns < retry.base.manifest.written_ns
    older = tmp_path / "ck" / "op" / failed.base.manifest.relative_path
    older.write_bytes(failed.base.manifest.encode())
    newer = tmp_path / "ck" / "op" / retry.base.manifest.relative_path
    second = newer.stat().st_mtime_ns // 10**9 * 10**9
    for path in (older, newer):
        os.utime(path, ns=(second, second))
    storage = chosen.storage("op")
    storage.remove_stale(failed.base.manifest)
    assert older.exists() and newer.exists(), "an attempt removed a newer attempt's manifest"
    storage.remove_stale(retry.base.manifest)
    assert newer.exists() and not older.exists()
    assert read(worker(tmp_path, "reader", chosen), 2, range(2)) == {0: 5, 1: 1}


def test_the_next_checkpoint_uploads_only_new_files(tmp_path: Path) -> None:
    chosen = backend(tmp_path)
    store = run(worker(tmp_path, "w", chosen), 0, MANY)
    run(store, 1, FEW)
    [first], [second] = manifests(tmp_path, 0), manifests(tmp_path, 1)
    new = shared_paths(second) - shared_paths(first)
    assert shared_paths(first) <= shared_paths(second)
    assert len(new) == 1 and second["attempt"] in next(iter(new))
    sizes = {f["path"]: f["size"] for f in second["files"]}
    # 1% of the keys; an SST also carries ~1.5 KB of index, filter and properties.
    assert sizes[next(iter(new))] * 5 < sum(sizes[p] for p in shared_paths(first))


def test_the_first_checkpoint_uploads_one_sorted_run_and_later_ones_leave_it_alone(
    tmp_path: Path,
) -> None:
    small = RocksDBOptions(write_buffer_size=MiB, memory_budget=8 * MiB, compaction_trigger=4)
    chosen = backend(tmp_path, options=small)
    bulk = {index: index for index in range(120_000)}  # several memtables' worth
    store = run(worker(tmp_path, "w", chosen), 0, bulk)
    [first] = manifests(tmp_path, 0)
    [base] = shared_paths(first)
    for batch in range(1, 9):  # small runs, past the compaction trigger
        store = run(store, batch, {index: batch for index in range(batch, 120_000, 400)})
    [last] = manifests(tmp_path, 8)
    assert base in shared_paths(last), "the base was merged again and re-uploaded"
    assert read(store, 9, range(9)) == {index: index for index in range(9)}


@pytest.mark.parametrize(("written", "restored"), [("level", "universal"), ("universal", "level")])
def test_a_checkpoint_restores_under_the_other_compaction_style(
    tmp_path: Path, written: Compaction, restored: Compaction
) -> None:
    chosen = backend(tmp_path, options=RocksDBOptions(compaction=written, compaction_trigger=2))
    store = worker(tmp_path, "w", chosen)
    for batch in range(4):  # more flushed runs than the trigger: a compaction runs
        run(store, batch, {index: batch for index in range(batch, 5_000, 7)})
    other = backend(tmp_path, options=RocksDBOptions(compaction=restored))
    reader = worker(tmp_path, "r", other)
    assert read(reader, 4, range(4)) == {0: 0, 1: 1, 2: 2, 3: 3}
    run(reader, 4, {index: 4 for index in range(5_000)})
    assert read(worker(tmp_path, "again", chosen), 5, range(0, 5_000, 999)) == {
        index: 4 for index in range(0, 5_000, 999)
    }


def test_a_worker_at_the_committed_version_restores_nothing(tmp_path: Path) -> None:
    chosen = backend(tmp_path)
    store = run(worker(tmp_path, "w", chosen), 0, MANY)
    instance = store._instance_dir
    for batch in (1, 2, 3):
        run(store, batch, FEW)
        assert store.downloads == 0
        assert store._instance_dir == instance, "the instance was rebuilt"
    assert read(store, 4, range(2)) == {0: 2, 1: 1}


def test_a_restore_downloads_only_what_the_worker_lacks(tmp_path: Path) -> None:
    chosen = backend(tmp_path)
    worker_a, worker_b = worker(tmp_path, "a", chosen), worker(tmp_path, "b", chosen)
    run(worker_a, 0, MANY)
    run(worker_a, 1, FEW)
    run(worker_b, 2, {0: 3})  # b holds nothing: everything of version 1 is downloaded
    [version_1] = manifests(tmp_path, 1)
    assert worker_b.downloads == len(version_1["files"])
    run(worker_a, 3, {1: 3})  # a lacks only b's new SST, and version 2's private files
    [version_2] = manifests(tmp_path, 2)
    private = [f for f in version_2["files"] if not f["path"].startswith("shared/")]
    assert worker_a.downloads == len(private) + 1
    assert read(worker_a, 4, range(3)) == {0: 3, 1: 3, 2: 1}


def test_a_failed_task_rolls_back_from_the_local_checkpoint(tmp_path: Path) -> None:
    chosen = backend(tmp_path)
    store = run(worker(tmp_path, "w", chosen), 0, MANY)
    assert read(store, 1, range(1)) == {0: 1}  # read() fails its task after reading
    store.begin(KeyedTask(TaskScope("q", 1, 0, 0), EVERYTHING), StateDeclarations(ALL), 0)
    store.set_current_key((0,), 0)
    store.state(COUNT).update(42)
    store.discard()
    assert read(store, 1, range(1)) == {0: 1}
    assert store.downloads == 0


def test_shared_files_live_while_a_retained_version_lists_them(tmp_path: Path) -> None:
    chosen = backend(tmp_path, retain=2)
    store = worker(tmp_path, "w", chosen, retain=2)
    run(store, 0, MANY)
    uploaded: set[str] = set()
    for batch in range(1, 12):
        run(store, batch, {index: batch for index in range(batch, 5_000, 50)})
        uploaded |= stored_shared(tmp_path)
    retained = [manifests(tmp_path, version)[0] for version in (9, 10, 11)]
    referenced = set().union(*(shared_paths(m) for m in retained))
    stored = stored_shared(tmp_path)
    assert referenced <= stored
    assert stored - referenced <= {p for p in stored if int(p[7:19]) >= 10}
    assert uploaded - stored, "nothing was ever collected"
    shared_by_all = set.intersection(*(shared_paths(m) for m in retained))
    assert any(int(p[7:19]) < 9 for p in shared_by_all), "an old file still in use was kept"
    assert sorted(p.name for p in (tmp_path / "ck" / "op").glob("v*")) == [
        f"v{v:012d}" for v in (9, 10, 11)
    ]


def test_a_list_append_and_a_map_put_are_one_write(tmp_path: Path) -> None:
    chosen = backend(tmp_path)
    store = worker(tmp_path, "w", chosen)
    store.begin(KeyedTask(TaskScope("q", 0, 0, 0), EVERYTHING), StateDeclarations(ALL), 0)
    store.set_current_key(("k",), 1)
    store.state(EVENTS).extend(f"e{i}" for i in range(100))
    store.state(ATTRS).put_all({f"a{i}": float(i) for i in range(100)})
    store.snapshot().wait()
    store.begin(KeyedTask(TaskScope("q", 1, 0, 0), EVERYTHING), StateDeclarations(ALL), 0)
    store.set_current_key(("k",), 1)

    def writes() -> int:
        return int(store.db.property_int_value("rocksdb.num-entries-active-mem-table"))

    assert writes() == 0
    store.state(EVENTS).append("new")
    assert writes() == 1
    store.state(ATTRS).put("a5", 5.5)
    assert writes() == 2
    assert store.state(EVENTS).get()[-2:] == ["e99", "new"]
    assert dict(store.state(ATTRS).items())["a5"] == 5.5


def test_entries_of_similar_keys_stay_apart(tmp_path: Path) -> None:
    store = worker(tmp_path, "w", backend(tmp_path))
    store.begin(KeyedTask(TaskScope("q", 0, 0, 0), EVERYTHING), StateDeclarations(ALL), 0)
    keys = [("a",), ("ab",), ("a", "b"), (1,), (1, 2), (None,), ("",)]
    for index, key in enumerate(keys):
        store.set_current_key(key, 3)
        store.state(EVENTS).append(str(index))
        store.state(ATTRS).put("k", float(index))
    for index, key in enumerate(keys):
        store.set_current_key(key, 3)
        assert store.state(EVENTS).get() == [str(index)], key
        assert store.state(ATTRS).items() == [("k", float(index))], key


def test_a_dropped_state_is_gone_when_declared_again(tmp_path: Path) -> None:
    store = worker(tmp_path, "w", backend(tmp_path))
    store.begin(KeyedTask(TaskScope("q", 0, 0, 0), EVERYTHING), StateDeclarations(ALL), 0)
    store.set_current_key(("k",), 1)
    store.state(EVENTS).append("x")
    store.state(COUNT).update(1)
    store.snapshot().wait()
    store.begin(
        KeyedTask(TaskScope("q", 1, 0, 0), EVERYTHING),
        StateDeclarations([COUNT], ["events", "attrs"]),
        0,
    )
    store.snapshot().wait()
    store.begin(KeyedTask(TaskScope("q", 2, 0, 0), EVERYTHING), StateDeclarations(ALL), 0)
    store.set_current_key(("k",), 1)
    assert (store.state(COUNT).value(), store.state(EVENTS).get()) == (1, [])


def test_expired_entries_nobody_reads_are_swept_within_a_round_of_batches(
    tmp_path: Path,
) -> None:
    expiring = ValueStateDescriptor("expiring", int, ttl=10)
    store = worker(tmp_path, "w", backend(tmp_path))
    store.begin(KeyedTask(TaskScope("q", 0, 0, 0), EVERYTHING), StateDeclarations([expiring]), 0)
    for index in range(64):
        store.set_current_key((index,), index % MAX_P)
        store.state(expiring).update(index)
    store.snapshot().wait()
    prefixes = [key_group_prefix(kg) + state_id("expiring") for kg in range(MAX_P)]

    def stored() -> int:
        return sum(1 for key in store.db.keys() if key[:6] in prefixes)  # noqa: SIM118

    for batch in range(1, SWEEP_ROUNDS + 1):
        assert stored() > 0
        store.begin(
            KeyedTask(TaskScope("q", batch, 0, 0), EVERYTHING),
            StateDeclarations([expiring]),
            20_000,
        )
        store.snapshot().wait()
    assert stored() == 0


def test_key_groups_outside_the_task_are_dropped_on_scale_out(tmp_path: Path) -> None:
    chosen = backend(tmp_path)
    run(worker(tmp_path, "one", chosen), 0, {index: index for index in range(64)})
    half = worker(tmp_path, "half", chosen)
    half.key_groups = type(EVERYTHING)(0, MAX_P // 2 - 1)
    half.begin(KeyedTask(TaskScope("q", 1, 0, 0), half.key_groups), StateDeclarations(ALL), 0)
    groups = {key_group_of(key) for key in half.db.keys()}  # noqa: SIM118 (Rdict is no dict)
    assert groups == set(range(MAX_P // 2)), "key groups of the other half survived the restore"
    half.set_current_key((3,), 3)
    assert half.state(COUNT).value() == 3


def test_snapshot_figures_equal_the_stores_listing(tmp_path: Path) -> None:
    """The bytes a snapshot reports written are those of the files its version added to the
        store (new SSTs in ``shared/`` named by the version, its private folder; the manifest
    aside), and the state's
        bytes those of every file its manifest lists, as the store's listing sizes them."""
    chosen = backend(tmp_path)
    store = run(worker(tmp_path, "w", chosen), 0, MANY)
    figures = [store.snapshot_metrics()]
    figures.append(run(store, 1, FEW).snapshot_metrics())
    operator = tmp_path / "ck" / "op"
    for version, shown in enumerate(figures):
        stamp = f"{version:012d}-"
        added = [p for p in (operator / "shared").iterdir() if p.name.startswith(stamp)]
        [private] = [p for p in (operator / f"v{version:012d}").iterdir() if p.is_dir()]
        written = sum(p.stat().st_size for p in [*added, *private.iterdir()])
        [content] = manifests(tmp_path, version)
        listed = sum((operator / f["path"]).stat().st_size for f in content["files"])
        shown.pop("state_entries_estimate")  # against a count: the test below
        assert shown == {"snapshot_bytes": written, "state_bytes": listed}
    # Incremental: the second version re-lists the first one's SSTs; it writes one small SST
    # and its private files (MANIFEST, OPTIONS: a few KB every version).
    assert figures[0]["snapshot_bytes"] == figures[0]["state_bytes"]
    assert figures[1]["snapshot_bytes"] * 2 < figures[1]["state_bytes"]


def test_the_entry_estimate_and_the_keys_per_key_group_against_the_keys_written(
    tmp_path: Path,
) -> None:
    """RocksDB's ``rocksdb.estimate-num-keys`` in a snapshot's figures: right after the first
    snapshot (compacted into one sorted run) it equals the entries read back with pyarrow
    (``read_state``, firesteel's own entries included); after a batch that overwrote some
    keys it counts each overwrite until a compaction merges it, so it lies between the
    count and the count plus the writes. ``firesteel status --key-groups`` counts the keys
    of each key group as the test wrote them."""
    from firesteel.backends.inspect import read_state
    from firesteel.cli.status import state_status

    chosen = backend(tmp_path)
    store = run(worker(tmp_path, "w", chosen), 0, MANY)
    first = store.snapshot_metrics()["state_entries_estimate"]
    stored = read_state(chosen.location, operator="op", batch=0)
    assert first == stored.num_rows
    second = run(store, 1, FEW).snapshot_metrics()["state_entries_estimate"]
    stored = read_state(chosen.location, operator="op", batch=1)
    assert stored.num_rows <= second <= stored.num_rows + len(FEW)
    assert second > first  # the overwrites of FEW are still in the estimate

    (counted,) = state_status(chosen.location, key_groups=True)["operators"].values()
    expected = {str(group): len(range(group, len(MANY), MAX_P)) for group in range(MAX_P)}
    assert {g: c["keys"] for g, c in counted["key_groups"].items()} == expected
    assert {g: c["entries"] for g, c in counted["key_groups"].items()} == expected
    assert counted["keys"] == counted["entries"] == len(MANY)
