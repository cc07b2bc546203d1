"""Crash tests of the RocksDB backend: SIGKILL during uploads, restores and at random, then count.

The job (``jobs/rocksdb_state_job.py``) ranks sequence-numbered records per key
in RocksDB state and writes through the transactional file sink. After the
harness has killed and restarted it until it completes: every seq appears
exactly once, every record's rank is its position among its key's records
(no state update lost or applied twice), timers fired once per batch, the
checkpoint holds each key's total, and the checkpoint folder holds exactly
what its retained manifests reference (the killed attempts' uploads are gone).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from firesteel.backends.inspect import read_state
from firesteel.files import read_committed
from firesteel.rocksdb.store import MID_RESTORE, MID_UPLOAD
from firesteel.testing import (
    AtPoints,
    CrashHarness,
    CrashResult,
    Spellings,
    at_point,
    at_random,
    batch_started,
)
from firesteel.testing.ranked import assert_ranked_output, assert_ranked_state

pytestmark = [pytest.mark.crash, pytest.mark.timeout(600)]

JOB = Path(__file__).parent / "jobs" / "rocksdb_state_job.py"
FILES = 15
ROWS_PER_FILE = 25
FILES_PER_BATCH = 3
BATCHES = FILES // FILES_PER_BATCH
KEYS = 7


def key_of(seq: int) -> str:
    return f"k{(seq * 5) % KEYS}"


class RocksJob:
    def __init__(self, root: Path, parallelism: int = 2) -> None:
        self.source = root / "in"
        self.out = root / "out"
        self.checkpoint = root / "ck"
        self.state = root / "state"
        self.local = root / "local"
        self.checkpoints = Spellings(self.checkpoint)
        self.states = Spellings(self.state)
        self.parallelism = parallelism
        self.source.mkdir(parents=True)
        for index in range(FILES):
            seqs = list(range(index * ROWS_PER_FILE, (index + 1) * ROWS_PER_FILE))
            table = pa.table({"seq": pa.array(seqs, pa.int64()), "key": [key_of(s) for s in seqs]})
            pq.write_table(table, self.source / f"part-{index:04d}.parquet")
        self.expected = range(FILES * ROWS_PER_FILE)

    def args(self, run: int) -> list[str]:
        """Run ``run``'s arguments: each restart spells the checkpoint and state otherwise."""
        return self.args_with(self.parallelism, run)

    def args_with(self, parallelism: int, run: int) -> list[str]:
        """The job's arguments with another operator parallelism (a user's rescale)."""
        return [
            str(self.source),
            str(self.out),
            self.checkpoints(run),
            self.states(run),
            str(self.local),
            str(FILES_PER_BATCH),
            str(parallelism),
        ]

    def check(self, result: CrashResult) -> None:
        context = f"\n{result.summary()}"
        committed = read_committed(str(self.out))
        assert_ranked_output(committed, self.expected, key_of, BATCHES, context)
        state = read_state(f"file://{self.state}", operator="rank")
        assert_ranked_state(state, self.expected, key_of, BATCHES, context)
        self.check_storage(context)

    def check_storage(self, context: str) -> None:
        """Only retained versions remain, and shared/ holds exactly the files they reference
        (files of the last batch's attempts aside, which the next batch would collect)."""
        base = self.state / "rank"
        versions = sorted(p.name for p in base.glob("v*"))
        assert versions == [f"v{v:012d}" for v in (BATCHES - 2, BATCHES - 1)], context
        referenced = {
            entry["path"].split("/", 1)[1]
            for manifest in base.glob("v*/*.json")
            for entry in json.loads(manifest.read_text())["content"]["files"]
            if entry["path"].startswith("shared/")
        }
        stored = {p.name for p in (base / "shared").iterdir()}
        assert referenced <= stored, f"referenced files are missing{context}"
        unreferenced = stored - referenced
        oldest_kept = BATCHES - 2
        stale = sorted(n for n in unreferenced if int(n.lstrip(".")[:12]) < oldest_kept)
        assert not stale, f"files no retained version needs were kept: {stale}{context}"


def test_killed_during_upload_restore_and_at_random(tmp_path: Path) -> None:
    job = RocksJob(tmp_path / "job")
    kills = [
        at_point(MID_UPLOAD, batch=1, partition=0),
        at_point(MID_RESTORE, batch=1),
        at_random((0.0, 1.5), when=batch_started(job.checkpoint, 2)),
    ]
    with CrashHarness(tmp_path / "harness", timeout=300) as harness:
        result = harness.run(JOB, job.args, kills)
    assert result.all_fired, result.summary()
    assert result.exit_codes == [-9] * len(kills) + [0]
    job.check(result)


def test_tasks_killed_during_upload_are_retried(tmp_path: Path) -> None:
    job = RocksJob(tmp_path / "job")
    task_kills = AtPoints((f"{MID_UPLOAD}@1:0", f"{MID_UPLOAD}@3:1"), mode="process")
    with CrashHarness(tmp_path / "harness", timeout=300) as harness:
        result = harness.run(JOB, job.args, [task_kills])
    assert result.all_fired, result.summary()
    assert result.exit_codes == [0]
    job.check(result)


def test_restarts_with_another_parallelism_restore_only_owned_key_groups(tmp_path: Path) -> None:
    """Killed mid-upload at parallelism 2, restarted at 3, killed at random, finished at 1."""
    job = RocksJob(tmp_path / "job")
    parallelisms = [2, 3, 1]
    kills = [
        at_point(MID_UPLOAD, batch=1, partition=0),
        at_random((0.0, 1.5), when=batch_started(job.checkpoint, 2)),
    ]
    with CrashHarness(tmp_path / "harness", timeout=300) as harness:
        result = harness.run(
            JOB,
            lambda run: job.args_with(parallelisms[min(run, len(parallelisms) - 1)], run),
            kills,
        )
    assert result.all_fired, result.summary()
    assert result.exit_codes == [-9, -9, 0]
    job.check(result)
