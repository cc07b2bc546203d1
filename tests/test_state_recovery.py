"""Crash tests of keyed state: kill the job at protocol points and at random, restart, count.

The job (``firesteel/testing/scripts/state_job.py``) ranks sequence-numbered records per key with
keyed state on the filesystem backend and writes through the transactional
file sink. After the harness has killed and restarted it until it completes:
every seq appears exactly once in the committed output, every key's timers
fire once per batch it had records in (but the last), every record's rank
is its position among its key's records (no state update lost or applied
twice), and the state checkpoint holds each key's total -- the same output
and state as a run without failures, computed here from the input. The output
is read with pyarrow's dataset reader, not firesteel's. The test runs twice:
with the state on local disk, and on the S3 server process (the session's
``spark.hadoop.fs.s3a.*`` reach the backend). Both stores go through the same
snapshot and commit code (``firesteel.core.storage``), so the path's eight
whole-job kills and twelve task kills are split between them, four and six
each, every protocol point hit (:data:`KILL_POINTS`), rather than each store
paying a second full loop of JVM starts (issue 30).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from files_helpers import write_sequence_files

from firesteel.backends.inspect import read_state
from firesteel.core.storage import StorageConfig
from firesteel.testing import (
    CrashHarness,
    CrashResult,
    Spellings,
    at_point,
    at_random,
    batch_started,
    task_kills,
)
from firesteel.testing.clock import clock_offset
from firesteel.testing.ranked import RankedRun
from firesteel.testing.s3 import S3Server
from firesteel.testing.scripts import script

pytestmark = pytest.mark.crash

JOB = script("state_job")
FILES = 39
ROWS_PER_FILE = 25
FILES_PER_BATCH = 3
KEYS = 7


def key_of(seq: int) -> str:
    return f"k{(seq * 5) % KEYS}"


PARALLELISM = (2, 3, 1, 4, 2)
"""The operator's parallelism in each run: every restart rescales the keyed state."""
KILL_POINTS = {
    "local": (
        at_point("state.after_snapshot", batch=1, partition=0),
        at_point("driver.before_commit", batch=2),
        at_point("driver.after_commit", batch=3),
    ),
    "s3": (
        at_point("state.after_snapshot", batch=1),
        at_point("sink.after_write", batch=2),
        at_point("driver.mid_commit", batch=3),
    ),
}
"""Each store's protocol-point kills: together the snapshot, vote and commit points."""


class StateJob:
    """The job's input and locations; with ``s3``, its state lives in a bucket on the
    server, spelled ``s3a://`` and ``s3://`` on alternate restarts, and the session
    reaches it through ``spark.hadoop.fs.s3a.*``."""

    def __init__(self, root: Path, s3: S3Server | None = None) -> None:
        self.source = root / "in"
        self.out = root / "out"
        self.checkpoint = root / "ck"
        self.state = root / "state"
        self.checkpoints = Spellings(self.checkpoint)
        self.s3 = s3
        self.bucket = s3.create_bucket(f"state-crash-{uuid.uuid4().hex[:8]}") if s3 else ""
        self.states = s3.spellings(self.bucket, "state") if s3 else Spellings(self.state)
        self.expected = write_sequence_files(
            self.source, FILES, ROWS_PER_FILE, lambda seqs: {"key": [key_of(s) for s in seqs]}
        )

    def args(self, run: int) -> list[str]:
        """Run ``run``'s arguments: each restart spells the checkpoint and state otherwise
        and runs the operator at another parallelism."""
        return [
            str(self.source),
            str(self.out),
            self.checkpoints(run),
            self.states(run),
            str(FILES_PER_BATCH),
            str(PARALLELISM[run % len(PARALLELISM)]),
        ]

    def env(self, run: int) -> dict[str, str]:
        """Run ``run``'s environment: from the second restart on, the clock an hour behind."""
        return {
            **(clock_offset(-3600) if run >= 2 else {}),
            **(self.s3.job_env() if self.s3 else {}),
        }

    def check(self, result: CrashResult) -> None:
        context = f"\n{result.summary()}"
        run = RankedRun(self.expected, key_of, FILES // FILES_PER_BATCH, context)
        # pyarrow's dataset reader, not firesteel's: it sees every visible file.
        run.assert_output(ds.dataset(str(self.out), format="parquet").to_table())
        if self.s3:
            listed = self.s3.client().list_objects_v2(Bucket=self.bucket, Prefix="state/rank/")
            keys = [item["Key"] for item in listed.get("Contents", [])]
            assert any(key.endswith(".snap") for key in keys), f"no snapshot on S3{context}"
            location, storage = f"s3a://{self.bucket}/state", StorageConfig.of(self.s3.settings())
        else:
            location, storage = f"file://{self.state}", None
        run.assert_state(read_state(location, operator="rank", storage=storage))


@pytest.fixture(params=["local", "s3"])
def state_job(request: pytest.FixtureRequest, tmp_path: Path) -> StateJob:
    """The job with its state on local disk, then on the S3 server."""
    s3 = request.getfixturevalue("s3_server") if request.param == "s3" else None
    return StateJob(tmp_path / "job", s3)


def test_killed_at_protocol_points_and_at_random_then_tasks_killed(
    crash_harness: CrashHarness, state_job: StateJob, request: pytest.FixtureRequest
) -> None:
    """Four SIGKILLs of the whole job (this store's snapshot, vote or commit points, one
    random moment), each restart at another parallelism; from the second restart on, the
    whole job (Spark's JVM included) runs with its wall clock an hour behind, so the
    timers registered before still fire in the next batch. The run that completes loses
    a task six times (after a snapshot, after a write, after a vote) and Spark retries."""
    kills = [
        *KILL_POINTS[request.node.callspec.params["state_job"]],
        at_random((0.0, 1.5), when=batch_started(state_job.checkpoint, 5)),
        task_kills(
            ["state.after_snapshot", "sink.after_write", "sink.after_pre_commit"], range(9, 11)
        ),
    ]
    result = crash_harness.run(JOB, state_job.args, kills, env=state_job.env)
    assert result.all_fired, result.summary()
    assert result.kills == 10
    assert result.exit_codes == [-9] * 4 + [0]
    state_job.check(result)
