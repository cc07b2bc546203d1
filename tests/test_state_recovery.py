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

from firesteel.testing import (
    CrashHarness,
    at_point,
    at_random,
    batch_started,
    task_kills,
)
from firesteel.testing.clock import clock_offset
from firesteel.testing.ranked import RankedJob
from firesteel.testing.scripts import script

pytestmark = pytest.mark.crash

JOB = script("state_job")


@pytest.fixture
def state_job(tmp_path: Path) -> RankedJob:
    return RankedJob(tmp_path / "job")


def test_killed_at_protocol_points_and_at_random_then_tasks_killed(
    crash_harness: CrashHarness, state_job: RankedJob
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
