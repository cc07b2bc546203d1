"""Savepoints carry schema evolution: a job restored from one with an evolved state type.

State is written with version 1 of a processor's types on each backend, a
savepoint is taken of it, and a new query restores it on each backend (every
pair) with version 2 under each rule of :mod:`firesteel.state.schemas` (a
field added with a default, removed, renamed, a number widened): every key's
value, list and map state equals a reference computed in plain Python. A
change Avro does not resolve is refused before anything is touched (the
savepoint and the target location hashed before and after). A dict backend's
savepoint taken after an upgrade from its checkpoint, before the next full
snapshot, holds the older file's values converted. The executor-side protocol is
driven directly, without Spark (as in ``test_savepoints.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_state_evolution import (
    KEYS,
    RULES,
    V2,
    Profile,
    _expected,
    _profile,
    _read,
    _states,
    _tree,
    _write,
)

from firesteel.backends.savepoint import create
from firesteel.core.context import TaskScope
from firesteel.state.backend import KeyedTask, OperatorSpec, StateBackend, StateDescriptor
from firesteel.state.clock import CLOCK
from firesteel.state.keygroups import KeyGroupRange, operator_index
from firesteel.state.savepoint import SavepointError, SavepointRestore
from firesteel.state.savepoint.restore import declarations
from tests.test_state_backends import FOLDERS, MAX_P, Driver, key_group, make_backend

BACKENDS = ["heap", "filesystem", "rocksdb"]
EVOLVED = ["add a field with a default", "remove a field", "rename a field", "widen int to float"]


def _restore(
    backend: StateBackend,
    savepoint: str,
    descriptors: list[StateDescriptor],
    parallelism: int = 3,
    batch: int = 0,
) -> dict[tuple[Any, ...], Any]:
    """Batch ``batch`` of a query restoring ``savepoint`` (checked on the "driver" as
    ``stateful()`` checks it; loaded by its first batch): every key's states, read back."""
    spec = OperatorSpec("op", ("k",), MAX_P, parallelism)
    restore = SavepointRestore(savepoint).check(spec, descriptors)
    read = _read(descriptors)
    seen = {}
    for partition in range(parallelism):
        task = KeyedTask(
            TaskScope("query-2", batch, partition, 0),
            KeyGroupRange.for_partition(partition, parallelism, MAX_P),
        )
        states = declarations(restore, [*descriptors, CLOCK], ())
        store = backend.open_store(spec, task, states, 2_000)
        restore.apply(store, spec, task, states)
        for key in KEYS:
            if operator_index(key_group(key), parallelism, MAX_P) == partition:
                store.set_current_key(key, key_group(key))
                seen[key] = read(store, key)
        store.snapshot().wait()
    return seen


@pytest.fixture(scope="module")
def savepoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Per backend, a savepoint of version 1's state after two batches (parallelism 2)."""
    made = {}
    old = _states(Profile)
    for kind in BACKENDS:
        root = tmp_path_factory.mktemp(kind)
        backend = make_backend(kind, root, cache=False, full_snapshot_every=2)
        Driver(backend, 2, old).batch(0, KEYS[:20], _write(old, _profile))
        Driver(backend, 2, old).batch(1, KEYS[10:], _write(old, _profile))
        made[kind] = str(root / "savepoint")
        create(backend.location, made[kind], batch=1)
    return made


@pytest.mark.parametrize("target", BACKENDS)
@pytest.mark.parametrize("source", BACKENDS)
@pytest.mark.parametrize("rule", EVOLVED)
def test_a_savepoint_restores_into_each_evolved_type_on_every_backend_pair(
    savepoints: dict[str, str], tmp_path: Path, rule: str, source: str, target: str
) -> None:
    new_type, renames, make = RULES[rule]
    new = _states(new_type, renames=renames)
    backend = make_backend(target, tmp_path, cache=False)
    restored = _restore(backend, savepoints[source], new)
    assert restored == _expected(make)
    if rule == "widen int to float":
        assert all(isinstance(value[0].visits, float) for value in restored.values())
    # The converted state is the target's own from now on: the next batch (another
    # parallelism) restores it from the target's checkpoint as it is.
    assert _restore(backend, savepoints[source], new, parallelism=2, batch=1) == restored


@pytest.mark.parametrize("target", BACKENDS)
@pytest.mark.parametrize("source", BACKENDS)
def test_a_change_avro_does_not_resolve_is_refused_before_anything_is_touched(
    savepoints: dict[str, str], tmp_path: Path, source: str, target: str
) -> None:
    backend = make_backend(target, tmp_path, cache=False)
    stored = tmp_path / FOLDERS[target]
    before = (_tree(Path(savepoints[source])), _tree(stored))
    with pytest.raises(SavepointError) as refused:
        _restore(backend, savepoints[source], _states(V2["incompatible"]))
    message = str(refused.value)
    assert f"in savepoint {savepoints[source]} was written as" in message
    assert "reader type: string not compatible with writer" in message
    assert "Fix:" in message
    assert (_tree(Path(savepoints[source])), _tree(stored)) == before


@pytest.mark.parametrize("rule", ["remove a field", "widen int to float"])
@pytest.mark.parametrize("source", ["heap", "filesystem"])
def test_a_savepoint_taken_between_an_upgrade_and_the_next_full_snapshot_holds_one_type(
    tmp_path: Path, source: str, rule: str
) -> None:
    """Version 1 writes a full snapshot; version 2, upgraded from the checkpoint, a delta
    of half the keys: the full snapshot still holds version 1's values. The savepoint of
    the delta's batch holds them in version 2's schema, and restores with version 2."""
    new_type, renames, make = RULES[rule]
    old, new = _states(Profile), _states(new_type, renames=renames)
    backend = make_backend(source, tmp_path, cache=False, full_snapshot_every=10)
    Driver(backend, 2, old).batch(0, KEYS[:20], _write(old, _profile))
    Driver(backend, 2, new).batch(1, KEYS[10:], _write(new, make))
    create(backend.location, str(tmp_path / "savepoint"), batch=1)
    restored = _restore(
        make_backend("rocksdb", tmp_path / "target"), str(tmp_path / "savepoint"), new
    )
    assert restored == _expected(make)
    values: list[Any] = []
    for value, history, by_day in restored.values():
        values.extend([value, *history, *by_day.values()])
    assert all(type(v) is new_type for v in values)
    if rule == "widen int to float":
        assert all(isinstance(v.visits, float) for v in values)
