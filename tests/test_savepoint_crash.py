"""Crash tests of savepoints: the writer killed at chosen and random points, a restoring job
killed once.

The writer is the ``firesteel savepoint create`` command, a plain Python process
(cheap to kill and restart). After each kill the target holds either a whole
savepoint or none: ``_savepoint.json`` is missing and :func:`open_savepoint`
refuses it; once it exists, every file it names is read with pyarrow's Parquet
reader (not firesteel's) and holds exactly the state of the source. A new
attempt on the same target after a kill succeeds over the leftovers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_savepoints import ALL, COUNT, EVENTS, MAX_P

from firesteel.backends.inspect import read_state
from firesteel.cli import main as cli
from firesteel.core.context import TaskScope
from firesteel.state.backend import KeyedTask, OperatorSpec, StateDeclarations
from firesteel.state.keygroups import KeyGroupRange
from firesteel.state.savepoint import SavepointError, open_savepoint
from firesteel.testing import CrashHarness, at_point, at_random
from tests.test_state_backends import make_backend

KEYS = 30_000
"""Enough state that writing the savepoint takes a good part of a second."""

pytestmark = pytest.mark.crash


def whole_or_refused(target: Path, expected_rows: int) -> bool:
    """True when ``target`` holds a whole savepoint (checked with pyarrow and json); False
    when it holds none and firesteel refuses it."""
    metadata_file = target / "_savepoint.json"
    if not metadata_file.exists():
        with pytest.raises(SavepointError, match="is missing"):
            open_savepoint(str(target))
        return False
    record = json.loads(metadata_file.read_text())
    files = [file for op in record["content"]["operators"].values() for file in op["files"]]
    rows = sum(pq.read_table(target / file["path"]).num_rows for file in files)
    assert rows == expected_rows == sum(file["rows"] for file in files)
    open_savepoint(str(target)).verify()
    return True


def test_the_writer_killed_at_chosen_and_random_points_leaves_whole_or_nothing(
    crash_harness: CrashHarness, tmp_path: Path
) -> None:
    backend = make_backend("filesystem", tmp_path, cache=False)
    for batch in range(2):
        task = KeyedTask(TaskScope("q", batch, 0, 0), KeyGroupRange(0, MAX_P - 1))
        spec = OperatorSpec("op", ("sensor",), MAX_P, 1)
        store = backend.open_store(spec, task, StateDeclarations(ALL), 1_000)
        for index in range(KEYS):
            store.set_current_key((f"s{index}",), index % MAX_P)
            store.state(COUNT).update(index + batch)
            store.state(EVENTS).append(f"e{batch}")
        store.snapshot().wait()
    expected_rows = len(read_state(backend.location, batch=1))
    assert expected_rows == 3 * KEYS
    # The command takes about 2.5 s here, the last second of it reading and writing state.
    kills = [
        at_point("savepoint.before_metadata", batch=1),
        at_random((1.4, 2.6)),
        at_point("savepoint.before_metadata", batch=1),
        at_random((1.4, 2.6)),
        at_random((1.4, 2.6)),
    ]
    target_index = 0
    outcomes = []
    for kill in [*kills, None]:
        target = tmp_path / f"savepoint-{target_index}"
        args = ["savepoint", "create", backend.location, str(target), "--batch", "1"]
        record = crash_harness.attempt(cli.__file__, args, kill)
        whole = whole_or_refused(target, expected_rows)
        assert whole == (record.exit_code == 0), record
        outcomes.append((record.exit_code, whole))
        if whole:
            target_index += 1
    assert outcomes[0] == (-9, False) and outcomes[2] == (-9, False), outcomes
    assert outcomes[-1] == (0, True), outcomes
