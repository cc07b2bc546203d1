"""Crash tests of keyed state: kill the job at protocol points and at random, restart, count.

The job (``firesteel/testing/scripts/state_job.py``) ranks sequence-numbered records per key with
keyed state on the filesystem backend and writes through the transactional
file sink. After the harness has killed and restarted it until it completes:
every seq appears exactly once in the committed output, every key's timers
fire once per batch it had records in (but the last), every record's rank
is its position among its key's records (no state update lost or applied
twice), and the state checkpoint holds each key's total -- the same output
and state as a run without failures, computed here from the input.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from files_helpers import write_sequence_files

from firesteel.backends.inspect import read_state
from firesteel.files import read_committed
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
from firesteel.testing.ranked import assert_ranked_output, assert_ranked_state
from firesteel.testing.scripts import script

pytestmark = pytest.mark.crash

JOB = script("state_job")
FILES = 60
ROWS_PER_FILE = 25
FILES_PER_BATCH = 3
KEYS = 7


def key_of(seq: int) -> str:
    return f"k{(seq * 5) % KEYS}"


PARALLELISM = (2, 3, 1, 4, 2, 1, 3, 4, 2)
"""The operator's parallelism in each run: every restart rescales the keyed state."""


class StateJob:
    def __init__(self, root: Path) -> None:
        self.source = root / "in"
        self.out = root / "out"
        self.checkpoint = root / "ck"
        self.state = root / "state"
        self.checkpoints = Spellings(self.checkpoint)
        self.states = Spellings(self.state)
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

    def check(self, result: CrashResult) -> None:
        context = f"\n{result.summary()}"
        batches = FILES // FILES_PER_BATCH
        committed = read_committed(str(self.out))
        assert_ranked_output(committed, self.expected, key_of, batches, context)
        state = read_state(f"file://{self.state}", operator="rank")
        assert_ranked_state(state, self.expected, key_of, batches, context)


@pytest.fixture
def state_job(tmp_path: Path) -> StateJob:
    return StateJob(tmp_path / "job")


def test_killed_at_protocol_points_and_at_random_then_tasks_killed(
    crash_harness: CrashHarness, state_job: StateJob
) -> None:
    """Eight SIGKILLs of the whole job at snapshot, vote and commit points and at random,
    each restart at another parallelism; from the second restart on, the whole job
    (Spark's JVM included) runs with its wall clock an hour behind, so the timers
    registered before still fire in the next batch. The run that completes loses a task
    twelve times (after a snapshot, after a write, after a vote) and Spark retries."""
    checkpoint = state_job.checkpoint
    kills = [
        at_point("state.after_snapshot", batch=1, partition=0),
        at_point("driver.before_commit", batch=2),
        at_point("sink.after_write", batch=3),
        at_point("driver.after_commit", batch=4),
        at_point("state.after_snapshot", batch=5),
        at_point("driver.mid_commit", batch=6),
        at_random((0.0, 1.5), when=batch_started(checkpoint, 7)),
        at_random((0.0, 1.5), when=batch_started(checkpoint, 11)),
        task_kills(
            ["state.after_snapshot", "sink.after_write", "sink.after_pre_commit"], range(15, 19)
        ),
    ]
    result = crash_harness.run(
        JOB, state_job.args, kills, env=lambda run: clock_offset(-3600) if run >= 2 else {}
    )
    assert result.all_fired, result.summary()
    assert result.kills == 20
    assert result.exit_codes == [-9] * 8 + [0]
    state_job.check(result)
