"""Crash tests of the RocksDB backend: SIGKILL during uploads, restores and at random, then count.

The job (``jobs/rocksdb_state_job.py``) ranks sequence-numbered records per key
in RocksDB state and writes through the transactional file sink. After the
harness has killed and restarted it until it completes: every seq appears
exactly once, every record's rank is its position among its key's records
(no state update lost or applied twice), timers fired once per batch, the
checkpoint holds each key's total, and the checkpoint folder holds exactly
what its retained manifests reference (the killed attempts' uploads are gone).
The output is read with pyarrow's dataset reader, not firesteel's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from firesteel.backends.inspect import read_state
from firesteel.rocksdb.store import MID_RESTORE, MID_UPLOAD
from firesteel.testing import (
    CrashHarness,
    CrashResult,
    Spellings,
    at_point,
    at_random,
    batch_started,
    task_kills,
)
from firesteel.testing.ranked import assert_ranked_output, assert_ranked_state

pytestmark = [pytest.mark.crash, pytest.mark.timeout(600)]

JOB = Path(__file__).parent / "jobs" / "rocksdb_state_job.py"
FILES = 60
ROWS_PER_FILE = 25
FILES_PER_BATCH = 3
BATCHES = FILES // FILES_PER_BATCH
KEYS = 7


def key_of(seq: int) -> str:
    return f"k{(seq * 5) % KEYS}"


PARALLELISM = (2, 3, 1, 4, 2, 1, 3, 4, 2)
"""The operator's parallelism in each run: every restart rescales the key groups."""


class RocksJob:
    def __init__(self, root: Path) -> None:
        self.source = root / "in"
        self.out = root / "out"
        self.checkpoint = root / "ck"
        self.state = root / "state"
        self.local = root / "local"
        self.checkpoints = Spellings(self.checkpoint)
        self.states = Spellings(self.state)
        self.source.mkdir(parents=True)
        for index in range(FILES):
            seqs = list(range(index * ROWS_PER_FILE, (index + 1) * ROWS_PER_FILE))
            table = pa.table({"seq": pa.array(seqs, pa.int64()), "key": [key_of(s) for s in seqs]})
            pq.write_table(table, self.source / f"part-{index:04d}.parquet")
        self.expected = range(FILES * ROWS_PER_FILE)

    def args(self, run: int) -> list[str]:
        """Run ``run``'s arguments: each restart spells the checkpoint and state otherwise
        and runs the operator at another parallelism (a user's rescale)."""
        return [
            str(self.source),
            str(self.out),
            self.checkpoints(run),
            self.states(run),
            str(self.local),
            str(FILES_PER_BATCH),
            str(PARALLELISM[run % len(PARALLELISM)]),
        ]

    def check(self, result: CrashResult) -> None:
        context = f"\n{result.summary()}"
        # pyarrow's dataset reader, not firesteel's: it sees every visible file.
        committed = ds.dataset(str(self.out), format="parquet").to_table()
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


def test_killed_during_upload_restore_and_at_random_then_tasks_killed(tmp_path: Path) -> None:
    """Eight SIGKILLs of the whole job (mid-upload, mid-restore, protocol points, random),
    each restart at another parallelism, so restores move key-group ranges between
    instances; the run that completes loses a task twelve times (mid-upload, after a
    write, after a vote) and Spark retries it on the same local instances."""
    job = RocksJob(tmp_path / "job")
    kills = [
        at_point(MID_UPLOAD, batch=1, partition=0),
        at_point(MID_RESTORE, batch=1),
        at_point("driver.before_commit", batch=2),
        at_point(MID_UPLOAD, batch=3),
        at_point("driver.after_commit", batch=4),
        at_point("driver.mid_commit", batch=5),
        at_random((0.0, 1.5), when=batch_started(job.checkpoint, 7)),
        at_random((0.0, 1.5), when=batch_started(job.checkpoint, 11)),
        task_kills([MID_UPLOAD, "sink.after_write", "sink.after_pre_commit"], range(15, 19)),
    ]
    with CrashHarness(tmp_path / "harness", timeout=300) as harness:
        result = harness.run(JOB, job.args, kills)
    assert result.all_fired, result.summary()
    assert result.kills == 20
    assert result.exit_codes == [-9] * 8 + [0]
    job.check(result)
