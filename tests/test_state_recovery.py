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
    AtPoints,
    CrashHarness,
    CrashResult,
    Spellings,
    at_point,
    at_random,
    batch_started,
)
from firesteel.testing.clock import clock_offset
from firesteel.testing.ranked import assert_ranked_output, assert_ranked_state
from firesteel.testing.scripts import script

pytestmark = pytest.mark.crash

JOB = script("state_job")
FILES = 15
ROWS_PER_FILE = 25
FILES_PER_BATCH = 3
KEYS = 7


def key_of(seq: int) -> str:
    return f"k{(seq * 5) % KEYS}"


class StateJob:
    def __init__(self, root: Path, parallelism: int = 2) -> None:
        self.source = root / "in"
        self.out = root / "out"
        self.checkpoint = root / "ck"
        self.state = root / "state"
        self.checkpoints = Spellings(self.checkpoint)
        self.states = Spellings(self.state)
        self.parallelism = parallelism
        self.expected = write_sequence_files(
            self.source, FILES, ROWS_PER_FILE, lambda seqs: {"key": [key_of(s) for s in seqs]}
        )

    def args(self, run: int) -> list[str]:
        """Run ``run``'s arguments: each restart spells the checkpoint and state otherwise."""
        return [
            str(self.source),
            str(self.out),
            self.checkpoints(run),
            self.states(run),
            str(FILES_PER_BATCH),
            str(self.parallelism),
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


def test_killed_at_protocol_points(crash_harness: CrashHarness, state_job: StateJob) -> None:
    """From the second restart on, the whole job (Spark's JVM included) runs with its wall
    clock an hour behind: the timers registered before still fire in the next batch."""
    kills = [
        at_point("state.after_snapshot", batch=1, partition=0),
        at_point("driver.before_commit", batch=2),
        at_point("state.after_snapshot", batch=3, partition=1),
        at_point("driver.after_commit", batch=4),
    ]
    result = crash_harness.run(
        JOB, state_job.args, kills, env=lambda run: clock_offset(-3600) if run >= 2 else {}
    )
    assert result.all_fired, result.summary()
    assert result.exit_codes == [-9] * len(kills) + [0]
    state_job.check(result)


def test_tasks_killed_after_snapshot_are_retried(
    crash_harness: CrashHarness, state_job: StateJob
) -> None:
    task_kills = AtPoints(
        ("state.after_snapshot@1:0", "state.after_snapshot@3:1", "state.after_snapshot@4"),
        mode="process",
    )
    result = crash_harness.run(JOB, state_job.args, [task_kills])
    assert result.all_fired, result.summary()
    assert result.exit_codes == [0]
    state_job.check(result)


def test_killed_at_random_times(crash_harness: CrashHarness, state_job: StateJob) -> None:
    kills = [
        at_random((0.0, 1.5), when=batch_started(state_job.checkpoint, batch)) for batch in (1, 3)
    ]
    result = crash_harness.run(JOB, state_job.args, kills)
    assert result.all_fired, result.summary()
    state_job.check(result)
