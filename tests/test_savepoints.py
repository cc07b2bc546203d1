"""Savepoints in-process: taken on each backend, restored on each other at parallelism 1, 4, 16.

The executor-side protocol is driven directly (as in ``test_state_backends.py``):
state is written on one backend, a savepoint is taken of a batch, another
backend's stores are opened for a new query's first batch and load it through
:class:`SavepointRestore`, and the state is read back through the state API
and compared with a reference kept in plain Python dicts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from firesteel.backends.inspect import read_state, stored_state
from firesteel.backends.savepoint import create, read_savepoint
from firesteel.core.context import TaskScope
from firesteel.core.errors import ConfigError
from firesteel.core.storage import StorageConfig
from firesteel.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from firesteel.state.backend import KeyedTask, OperatorSpec, StateBackend
from firesteel.state.clock import CLOCK, advance
from firesteel.state.keygroups import KeyGroupRange, operator_index
from firesteel.state.savepoint import SavepointError, SavepointRestore, open_savepoint
from firesteel.state.savepoint.restore import declarations
from firesteel.state.serializers import unpack
from tests.test_state_backends import make_backend

COUNT = ValueStateDescriptor("count", int)
EVENTS = ListStateDescriptor("events", str)
ATTRS = MapStateDescriptor("attrs", float)
ALL = [COUNT, EVENTS, ATTRS]
MAX_P = 32
KEYS = [(f"sensor-{i}", i % 3) for i in range(60)]
BACKENDS = ["heap", "filesystem", "rocksdb"]

Reference = dict[tuple[Any, ...], tuple[Any, list[str], dict[str, float], list[int]]]


def key_group(key: tuple[Any, ...]) -> int:
    return zlib.crc32(repr(key).encode()) % MAX_P


def run_batch(
    backend: StateBackend,
    parallelism: int,
    batch: int,
    fn: Any,
    *,
    query: str = "query-1",
    restore: SavepointRestore | None = None,
    descriptors: list[Any] = ALL,
    dropped: tuple[str, ...] = (),
) -> dict[tuple[Any, ...], Any]:
    """One batch over every partition, as the operator runs it; ``fn(store, key)`` per key."""
    spec = OperatorSpec("op", ("sensor", "zone"), MAX_P, parallelism)
    seen = {}
    for partition in range(parallelism):
        task = KeyedTask(
            TaskScope(query, batch, partition, 0),
            KeyGroupRange.for_partition(partition, parallelism, MAX_P),
        )
        states = declarations(restore, [*descriptors, CLOCK], dropped)
        store = backend.open_store(spec, task, states, 5_000 + batch)
        if restore is not None:
            restore.apply(store, spec, task, states)
        advance(store, task.key_groups, 5_000 + batch)
        for key in KEYS:
            kg = key_group(key)
            if operator_index(kg, parallelism, MAX_P) == partition:
                store.set_current_key(key, kg)
                seen[key] = fn(store, key)
        store.snapshot().wait()
    return seen


def write(store: Any, key: tuple[Any, ...]) -> None:
    index = KEYS.index(key)
    if index % 5 == 4:
        return  # a fifth of the keys have no state at all
    count = store.state(COUNT)
    count.update((count.value() or 0) + index)
    store.state(EVENTS).append(f"e{index}-{count.value()}")
    store.state(ATTRS).put(f"a{index % 4}", index / 2)
    if index % 3 == 0:
        store.register_timer(100_000 + index)


def read(store: Any, key: tuple[Any, ...]) -> tuple[Any, list[str], dict[str, float], list[int]]:
    return (
        store.state(COUNT).value(),
        store.state(EVENTS).get(),
        dict(store.state(ATTRS).items()),
        store.timers(),
    )


def reference(batches: int) -> Reference:
    """The state ``batches`` runs of :func:`write` leave, computed in plain Python."""
    expected: Reference = {}
    for key in KEYS:
        index = KEYS.index(key)
        if index % 5 == 4:
            expected[key] = (None, [], {}, [])
            continue
        counts = [index * (b + 1) for b in range(batches)]
        timers = [100_000 + index] if index % 3 == 0 else []
        expected[key] = (
            counts[-1],
            [f"e{index}-{c}" for c in counts],
            {f"a{index % 4}": index / 2},
            timers,
        )
    return expected


@pytest.fixture(scope="module")
def savepoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One savepoint of batch 1 per backend (written at parallelism 3)."""
    made = {}
    for kind in BACKENDS:
        root = tmp_path_factory.mktemp(f"source-{kind}")
        backend = make_backend(kind, root, cache=False)
        for batch in range(2):
            run_batch(backend, 3, batch, write)
        target = str(root / "savepoint")
        create(backend.location, target, batch=1)
        made[kind] = target
    return made


@pytest.mark.parametrize("parallelism", [1, 4, 16])
@pytest.mark.parametrize("target_kind", BACKENDS)
@pytest.mark.parametrize("source_kind", BACKENDS)
def test_a_savepoint_restores_on_every_backend_at_any_parallelism(
    savepoints: dict[str, str],
    tmp_path: Path,
    source_kind: str,
    target_kind: str,
    parallelism: int,
) -> None:
    backend = make_backend(target_kind, tmp_path, cache=False)
    restore = SavepointRestore(savepoints[source_kind])
    loaded = run_batch(backend, parallelism, 0, read, query="query-2", restore=restore)
    assert loaded == reference(2)
    # The next batch (another parallelism) finds the marker and does not load again.
    run_batch(backend, 2, 1, write, query="query-2", restore=restore)
    assert run_batch(backend, 5, 2, read, query="query-2", restore=restore) == reference(3)
    # The job may drop restore_from once restored: the marker state is then dropped quietly.
    assert run_batch(backend, 1, 3, read, query="query-2") == reference(3)


def test_the_savepoint_is_self_describing_parquet(savepoints: dict[str, str]) -> None:
    savepoint = open_savepoint(savepoints["rocksdb"])
    savepoint.verify()
    part = savepoint.operator("op")
    assert savepoint.batch == 1
    assert part.key_columns == ["sensor", "zone"] and part.max_parallelism == MAX_P
    assert part.states == {
        "count": {"kind": "value", "serializer": "msgpack", "schema": '"long"'},
        "events": {"kind": "list", "serializer": "msgpack", "schema": '"string"'},
        "attrs": {"kind": "map", "serializer": "msgpack", "schema": '"double"'},
        "__timers__": {"kind": "timer", "serializer": "msgpack"},
    }
    assert part.processing_time == (5_001, 5_001)
    files = list(Path(savepoints["rocksdb"]).glob("op/*.parquet"))
    assert len(files) == 1 and pq.read_table(files[0]).num_rows == part.rows().num_rows
    # The savepoint reads as the same table a checkpoint does, whichever backend wrote it.
    for kind in BACKENDS:
        table = read_savepoint(savepoints[kind]).to_pandas().drop(columns=["key_group"])
        assert len(table) == len(read_savepoint(savepoints["heap"]))
        states = {"count", "events", "attrs", "__timers__", "__firesteel_clock__"}
        assert set(table["state"]) == states


def test_state_the_job_does_not_declare_is_refused_listing_it(
    savepoints: dict[str, str], tmp_path: Path
) -> None:
    backend = make_backend("filesystem", tmp_path, cache=False)
    restore = SavepointRestore(savepoints["heap"])
    with pytest.raises(SavepointError) as refused:
        run_batch(backend, 2, 0, read, query="q", restore=restore, descriptors=[COUNT])
    assert "list state 'events'" in str(refused.value)
    assert "map state 'attrs'" in str(refused.value)
    assert "allow_non_restored_state=True" in str(refused.value)
    only_count = run_batch(
        backend,
        2,
        0,
        lambda store, key: store.state(COUNT).value(),
        query="q",
        restore=SavepointRestore(savepoints["heap"], allow_non_restored_state=True),
        descriptors=[COUNT],
    )
    assert only_count == {key: value[0] for key, value in reference(2).items()}


def test_a_state_whose_kind_changed_since_the_savepoint_is_refused_before_the_query_starts(
    savepoints: dict[str, str], tmp_path: Path
) -> None:
    """A changed type evolves (tests/test_savepoint_evolution.py); a changed kind cannot,
    and the driver's check refuses it before any state location is touched."""
    spec = OperatorSpec("op", ("sensor", "zone"), MAX_P, 2)
    listed = [ListStateDescriptor("count", int), EVENTS, ATTRS]
    refusal = r"state 'count' is a value state in savepoint .* but is declared as list"
    with pytest.raises(SavepointError, match=refusal):
        SavepointRestore(savepoints["filesystem"]).check(spec, listed)
    backend = make_backend("rocksdb", tmp_path, cache=False)
    restore = SavepointRestore(savepoints["filesystem"])
    with pytest.raises(SavepointError, match=refusal):
        run_batch(backend, 2, 0, read, query="q", restore=restore, descriptors=listed)
    assert not list((tmp_path / "rocksdb").rglob("v*")), "a checkpoint was written"


def test_an_operator_the_savepoint_does_not_know_is_refused_naming_what_it_holds(
    savepoints: dict[str, str],
) -> None:
    renamed = OperatorSpec("renamed", ("sensor", "zone"), MAX_P, 2)
    with pytest.raises(SavepointError, match="it holds the state of 'op', which would be dropped"):
        SavepointRestore(savepoints["heap"]).check(renamed)
    SavepointRestore(savepoints["heap"], allow_non_restored_state=True).check(renamed)
    with pytest.raises(SavepointError, match="set max_parallelism=32"):
        SavepointRestore(savepoints["heap"]).check(OperatorSpec("op", ("sensor", "zone"), 64, 2))


def test_a_state_location_with_state_of_its_own_is_not_overwritten(
    savepoints: dict[str, str], tmp_path: Path
) -> None:
    backend = make_backend("heap", tmp_path, cache=False)
    run_batch(backend, 2, 0, write, query="q")
    with pytest.raises(SavepointError, match="already holds state that was not restored"):
        run_batch(backend, 2, 1, read, query="q", restore=SavepointRestore(savepoints["heap"]))


def test_state_restored_from_one_savepoint_refuses_another(
    savepoints: dict[str, str], tmp_path: Path
) -> None:
    """restore_from kept across restarts loads nothing again; pointed at another savepoint
    (here one of batch 0, which would fit batch 1) it is refused, never silently ignored."""
    source = Path(savepoints["heap"]).parent / "heap"
    other = str(tmp_path / "batch-0")
    create(str(source), other, batch=0)
    spec = OperatorSpec("op", ("sensor", "zone"), MAX_P, 2)
    first = SavepointRestore(savepoints["heap"]).check(spec)
    assert first.savepoint_id == open_savepoint(savepoints["heap"]).id
    backend = make_backend("filesystem", tmp_path, cache=False)
    assert run_batch(backend, 2, 0, read, query="q", restore=first) == reference(2)
    assert run_batch(backend, 3, 1, read, query="q", restore=first) == reference(2)
    changed = SavepointRestore(other).check(spec)
    with pytest.raises(SavepointError, match=r"key group 0 was restored from savepoint \w+, and"):
        run_batch(backend, 3, 2, read, query="q", restore=changed)


@pytest.mark.parametrize(
    ("first_batch", "refusal"),
    [(4, "miss the records of batches 2-3"), (1, "records of batch 1 would be counted twice")],
)
def test_a_savepoint_loads_only_into_the_batch_after_its_own(
    savepoints: dict[str, str], tmp_path: Path, first_batch: int, refusal: str
) -> None:
    """The savepoint holds batch 1: a query whose first batch is 2 (the same checkpoint)
    loads it, as does batch 0 (a new checkpoint, above); a query going on after another
    batch would miss records of its own or count some twice, and is refused."""
    restore = SavepointRestore(savepoints["heap"])
    refused = make_backend("filesystem", tmp_path / "refused", cache=False)
    after = first_batch - 1
    message = rf"holds the state of batch 1, but this query goes on after batch {after}.*{refusal}"
    with pytest.raises(SavepointError, match=message):
        run_batch(refused, 2, first_batch, read, query="q", restore=restore)
    backend = make_backend("filesystem", tmp_path, cache=False)
    assert run_batch(backend, 2, 2, read, query="q", restore=restore) == reference(2)


def test_a_savepoint_without_metadata_is_refused_and_targets_are_never_reused(
    savepoints: dict[str, str], tmp_path: Path
) -> None:
    with pytest.raises(SavepointError, match=r"_savepoint\.json is missing"):
        open_savepoint(str(tmp_path / "nothing"))
    source = str(Path(savepoints["heap"]).parent / "heap")
    with pytest.raises(SavepointError, match="already holds a savepoint"):
        create(source, savepoints["heap"], batch=1)
    with pytest.raises(ConfigError, match="give the query's checkpoint"):
        create(source, str(tmp_path / "sp"))


def test_a_savepoint_pairs_state_only_with_the_checkpoint_of_the_query_that_wrote_it(
    savepoints: dict[str, str], tmp_path: Path
) -> None:
    """The state was written by query "query-1": another query's checkpoint would record its
    batch and source positions beside that state, so it is refused, naming both queries."""
    source = str(Path(savepoints["heap"]).parent / "heap")
    checkpoint = tmp_path / "checkpoint"
    for folder in ("commits", "offsets"):
        (checkpoint / folder).mkdir(parents=True)
    (checkpoint / "commits" / "1").write_text('v1\n{"nextBatchWatermarkMs":0}')
    offsets = 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":5001}\n{"logOffset":1}'
    (checkpoint / "offsets" / "1").write_text(offsets)
    (checkpoint / "metadata").write_text('{"id":"query-2"}\n')
    refusal = r"'op'.* query query-1, but the checkpoint .* is query query-2's"
    with pytest.raises(ConfigError, match=refusal):
        create(source, str(tmp_path / "refused"), checkpoint=str(checkpoint))
    assert not (tmp_path / "refused").exists()
    (checkpoint / "metadata").write_text('{"id":"query-1"}\n')
    taken = create(source, str(tmp_path / "savepoint"), checkpoint=str(checkpoint))
    assert taken.batch == 1 and taken.offsets() == offsets.encode()


def test_the_cli_takes_and_shows_a_savepoint(savepoints: dict[str, str], tmp_path: Path) -> None:
    source = str(Path(savepoints["filesystem"]).parent / "fs")
    target = tmp_path / "cli-savepoint"
    cli = [sys.executable, "-m", "firesteel.cli.main", "savepoint"]
    made = subprocess.run(
        [*cli, "create", source, str(target), "--batch", "1"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "of batch 1" in made.stdout
    shown = subprocess.run(
        [*cli, "inspect", str(target)], capture_output=True, text=True, check=True
    )
    metadata = json.loads(shown.stdout[: shown.stdout.index("\n}\n") + 2])
    assert metadata["batch"] == 1 and list(metadata["operators"]) == ["op"]
    assert f"({len(read_state(source, batch=1))} entries)" in shown.stdout
    # A refusal is the message alone, for the person at the terminal: no traceback.
    again = subprocess.run(
        [*cli, "create", source, str(target), "--batch", "1"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr == (
        f"firesteel savepoint: error: {target} already holds a savepoint; choose a new target "
        "(savepoints are immutable)\n"
    )


def test_a_savepoint_tells_its_progress_a_key_group_at_a_time(
    savepoints: dict[str, str], tmp_path: Path
) -> None:
    """What ``firesteel savepoint create`` draws its progress bar from: each key group
    holding state, in order, with the operator's number of key groups."""
    source = str(Path(savepoints["filesystem"]).parent / "fs")
    told: list[tuple[str, int, int]] = []
    create(source, str(tmp_path / "sp"), batch=1, progress=lambda *step: told.append(step))
    # Key group -1 is the job's clock, one row apart from the key groups' rows.
    written = set(read_savepoint(str(tmp_path / "sp"))["key_group"].to_pylist()) - {-1}
    key_groups = [key_group for _, key_group, _ in told]
    assert key_groups == sorted(set(key_groups)) and set(key_groups) >= written
    assert len(written) > 1
    assert {(operator, groups) for operator, _, groups in told} == {("op", MAX_P)}


def test_a_savepoint_on_an_object_store(
    savepoints: dict[str, str], tmp_path: Path, s3_server: Any
) -> None:
    """Written to the S3 server process from a RocksDB checkpoint, listed with boto3, shown
    by the command with the server's settings, and restored from there into the filesystem
    backend."""
    bucket = s3_server.create_bucket("savepoints")
    storage = StorageConfig.of(s3_server.settings())
    source = str(Path(savepoints["rocksdb"]).parent / "rocksdb")
    target = f"s3a://{bucket}/sp/v1"
    create(f"file://{source}", target, batch=1, target_storage=storage)
    listed = s3_server.client().list_objects_v2(Bucket=bucket, Prefix="sp/v1/")
    names = sorted(item["Key"] for item in listed["Contents"])
    assert len(names) == 2 and names[0] == "sp/v1/_savepoint.json"
    assert names[1].startswith("sp/v1/op/") and names[1].endswith(".parquet")
    settings = [f"--conf={name}={value}" for name, value in s3_server.settings().items()]
    shown = subprocess.run(
        [sys.executable, "-m", "firesteel.cli.main", "savepoint", *settings, "inspect", target],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"({len(read_state(f'file://{source}', batch=1))} entries)" in shown.stdout
    restore = SavepointRestore(target, storage=s3_server.settings())
    backend = make_backend("filesystem", tmp_path, cache=False)
    assert run_batch(backend, 4, 0, read, query="q", restore=restore) == reference(2)


@pytest.mark.parametrize("kind", ["filesystem", "rocksdb"])
def test_a_savepoint_is_written_a_key_group_at_a_time_in_whole_row_groups(
    tmp_path: Path, kind: str
) -> None:
    """More rows than a row group, from two tasks' snapshots: the backend yields one key
    group at a time, in order, and the writer cuts 64k-row groups across them."""
    keys = 70_000
    backend = make_backend(kind, tmp_path, cache=False)
    spec = OperatorSpec("op", ("sensor", "zone"), MAX_P, 2)
    for partition in range(2):
        task = KeyedTask(
            TaskScope("query-1", 0, partition, 0),
            KeyGroupRange.for_partition(partition, 2, MAX_P),
        )
        store = backend.open_store(spec, task, declarations(None, [COUNT, CLOCK], ()), 5_000)
        advance(store, task.key_groups, 5_000)
        count = store.state(COUNT)
        for i in range(keys):
            key = (f"sensor-{i}", 0)
            kg = i % MAX_P
            if kg in task.key_groups:
                store.set_current_key(key, kg)
                count.update(i)
        store.snapshot().wait()

    stored = stored_state(backend.location, "op", 0)
    assert stored is not None
    first_group, first_entries = next(stored.key_groups)
    assert first_group == 0
    assert len(first_entries["count"]) == len(range(0, keys, MAX_P))
    assert [kg for kg, _ in stored.key_groups] == list(range(1, MAX_P))

    savepoint = create(backend.location, str(tmp_path / "savepoint"), batch=0)
    savepoint.verify()
    (file,) = Path(tmp_path / "savepoint").glob("op/*.parquet")
    meta = pq.ParquetFile(file).metadata
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert sizes == [65_536, keys - 65_536]
    rows = pq.read_table(file)
    groups = rows.column("key_group").to_pylist()
    assert groups == sorted(groups) and set(groups) == set(range(MAX_P))
    values = sorted(unpack(v) for v in rows.column("value").to_pylist())
    assert values == list(range(keys))
    assert savepoint.operator("op").processing_time == (5_000, 5_000)
