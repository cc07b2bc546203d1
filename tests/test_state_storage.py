"""Snapshot files of one version written by racing attempts of a batch."""

from __future__ import annotations

from pathlib import Path

from test_state_backends import ALL, KEYS, Driver, add_one, key_group, make_backend, read_count

from firesteel.state.backend import StateDeclarations
from firesteel.state.keygroups import operator_index


def test_a_zombie_attempt_finishing_late_removes_nothing_the_batch_needs(tmp_path: Path) -> None:
    """Attempt A (2 partitions) of batch 1 snapshots after its re-run B (1 partition) did.

    Each deleting the other's overlapping file would leave version 1 without
    one; instead the greater name survives, and the next batch restores from it.
    """
    backend = make_backend("filesystem", tmp_path, full_snapshot_every=3, cache=False)
    two, one = Driver(backend, parallelism=2), Driver(backend, parallelism=1)
    two.batch(0, KEYS, add_one)
    zombie = backend.open_store(two.spec, two.task(1, 0), StateDeclarations(ALL), 1_000)
    for key in KEYS:
        group = key_group(key)
        if operator_index(group, 2, 16) == 0:
            zombie.set_current_key(key, group)
            add_one(zombie, key)
    one.batch(1, KEYS, add_one)
    zombie.snapshot().wait()
    assert len(list((tmp_path / "fs").rglob("v000000000001/*.snap"))) == 2
    seen = two.batch(2, KEYS, read_count)
    assert {key: value[0] for key, value in seen.items()} == dict.fromkeys(KEYS, 2)
    seen = one.batch(3, KEYS, read_count)
    assert {key: value[0] for key, value in seen.items()} == dict.fromkeys(KEYS, 2)
