"""Crash tests of savepoints: the writer killed at chosen and random points, a restoring job
killed once.

The writer is the ``firesteel savepoint create`` command, a plain Python process
(cheap to kill and restart). After each kill the target holds either a whole
savepoint or none: ``_savepoint.json`` is missing and :func:`open_savepoint`
refuses it; once it exists, every file it names is read with pyarrow's Parquet
reader and msgpack (not firesteel's) and holds exactly the state the test wrote,
every key in its key group with its values. A new attempt on the same target
after a kill succeeds over the leftovers.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgpack
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from test_savepoints import ALL, COUNT, EVENTS, MAX_P

from firesteel.backends.inspect import read_state
from firesteel.backends.savepoint import create
from firesteel.cli import main as cli
from firesteel.core.context import TaskScope
from firesteel.state.backend import KeyedTask, OperatorSpec, StateDeclarations
from firesteel.state.keygroups import KeyGroupRange
from firesteel.state.savepoint import SavepointError, open_savepoint
from firesteel.testing import CrashHarness, at_point, at_random
from firesteel.testing.ranked import RankedRun
from firesteel.testing.scripts import script
from tests.test_state_backends import make_backend

JOB = script("state_job")

KEYS = 30_000
"""Enough state that writing the savepoint takes a good part of a second."""

pytestmark = pytest.mark.crash


def ranked_key(seq: int) -> str:
    return f"k{(seq * 5) % 7}"


Contents = dict[tuple[int, str, str], list[object]]
"""(key group, sensor, state name) -> the state's values, a list's in list order."""


def written_state() -> Contents:
    """The state the writer test stores by batch 1, computed in plain Python."""
    contents: Contents = {}
    for index in range(KEYS):
        contents[(index % MAX_P, f"s{index}", "count")] = [index + 1]
        contents[(index % MAX_P, f"s{index}", "events")] = ["e0", "e1"]
    return contents


def whole_or_refused(target: Path, expected: Contents) -> bool:
    """True when ``target`` holds a whole savepoint whose rows, read with pyarrow and
    decoded with msgpack (no firesteel code), are ``expected``; False when it holds none
    and firesteel refuses it."""
    metadata_file = target / "_savepoint.json"
    if not metadata_file.exists():
        with pytest.raises(SavepointError, match="is missing"):
            open_savepoint(str(target))
        return False
    record = json.loads(metadata_file.read_text())
    files = [file for op in record["content"]["operators"].values() for file in op["files"]]
    contents: Contents = {}
    rows = 0
    for file in files:
        table = pq.read_table(target / file["path"])
        # No map entries, timers or TTLs were written: those columns stay empty.
        assert table["user_key"].null_count == table["expires_ms"].null_count == table.num_rows
        rows += table.num_rows
        columns = (
            table.column(name).to_pylist() for name in ("key_group", "key", "state", "value")
        )
        for group, key, state, value in zip(*columns, strict=True):
            (sensor,) = msgpack.unpackb(key)
            contents.setdefault((group, sensor, state), []).append(msgpack.unpackb(value))
    assert rows == sum(file["rows"] for file in files)
    assert contents == expected
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
    expected = written_state()
    # The command takes 1.5-2.5 s here (idle or loaded), its last second reading and
    # writing state: a random kill lands before, during or just after its writes.
    kills = [
        at_point("savepoint.before_metadata", batch=1),
        at_random((0.8, 2.2)),
        at_point("savepoint.before_metadata", batch=1),
        at_random((0.8, 2.2)),
        at_random((0.8, 2.2)),
    ]
    target_index = 0
    outcomes = []
    for kill in [*kills, None]:
        target = tmp_path / f"savepoint-{target_index}"
        args = ["savepoint", "create", backend.location, str(target), "--batch", "1"]
        record = crash_harness.attempt(cli.__file__, args, kill)
        whole = whole_or_refused(target, expected)
        # A run that completed left it whole; a killed one left it whole (killed after
        # its metadata record was written) or refused, never anything between.
        assert whole or record.exit_code != 0, record
        outcomes.append((record.exit_code, whole))
        if whole:
            target_index += 1
    assert outcomes[0] == (-9, False) and outcomes[2] == (-9, False), outcomes
    assert outcomes[-1] == (0, True), outcomes


def test_a_job_killed_while_restoring_from_a_savepoint_stays_exactly_once(
    crash_harness: CrashHarness, tmp_path: Path
) -> None:
    """The keyed-state crash job runs half its input, a savepoint of its last committed
    batch is taken, and it goes on from the savepoint with its state in a new location
    and another parallelism, on the same Spark checkpoint: SIGKILLed once after the
    restoring batch's snapshot (the load then runs again from nothing), restarted at yet
    another parallelism. Output (read with pyarrow) and state are those of one run
    without failures."""
    files, per_file, per_batch = 24, 20, 3
    source, out, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    source.mkdir()

    def write_files(indexes: range) -> None:
        for index in indexes:
            seqs = range(index * per_file, (index + 1) * per_file)
            table = pa.table(
                {"seq": pa.array(seqs, pa.int64()), "key": [ranked_key(s) for s in seqs]}
            )
            pq.write_table(table, source / f"part-{index:04d}.parquet")

    def args(state: str, parallelism: int, *restore: str) -> list[str]:
        return [
            str(source),
            str(out),
            str(checkpoint),
            state,
            str(per_batch),
            str(parallelism),
            *restore,
        ]

    write_files(range(files // 2))
    first_state = f"file://{tmp_path}/state-1"
    assert crash_harness.run(JOB, args(first_state, 2)).exit_codes == [0]
    savepoint = str(tmp_path / "savepoint")
    taken = create(first_state, savepoint, checkpoint=str(checkpoint))
    restoring = taken.batch + 1
    write_files(range(files // 2, files))
    state = f"file://{tmp_path}/state-2"
    kills = [at_point("state.after_snapshot", batch=restoring, partition=0)]
    result = crash_harness.run(
        JOB, lambda run: args(state, (3, 4)[run], savepoint), kills, max_runs=2
    )
    assert result.all_fired and result.exit_codes == [-9, 0], result.summary()
    run = RankedRun(range(files * per_file), ranked_key, files // per_batch, result.summary())
    run.assert_output(ds.dataset(str(out), format="parquet").to_table())
    run.assert_state(read_state(state, operator="rank"))
