"""Crash tests of the file path: firesteel.files source -> map -> firesteel.files sink.

Each test feeds sequence-numbered Parquet files to ``firesteel/testing/scripts/files_job.py``
(exactly-once, several files per micro-batch), kills it with SIGKILL at named
protocol points, at random times, or kills tasks and executors, lets the
harness restart it from its checkpoint until it completes, and then counts
the output twice, through ``read_committed`` and through a plain pyarrow
dataset read of the output folder: 0 lost, 0 duplicated.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
from files_helpers import write_sequence_files

from firesteel.files import read_committed
from firesteel.testing import (
    CrashHarness,
    CrashResult,
    Spellings,
    assert_exactly_once,
    at_point,
    at_random,
    batch_started,
    task_kills,
)
from firesteel.testing.scripts import script

pytestmark = pytest.mark.crash

JOB = script("files_job")
FILES = 66
ROWS_PER_FILE = 20
FILES_PER_BATCH = 3
BATCHES = FILES // FILES_PER_BATCH


class FilesJob:
    """Input, output and checkpoint folders of one crash test."""

    def __init__(self, root: Path) -> None:
        self.source = root / "in"
        self.out = root / "out"
        self.checkpoint = root / "ck"
        self.checkpoints = Spellings(self.checkpoint)
        self.expected = write_sequence_files(
            self.source, FILES, ROWS_PER_FILE, lambda seqs: {"text": [f"r{i}" for i in seqs]}
        )

    def args(self, run: int) -> list[str]:
        """Run ``run``'s arguments: each restart spells the checkpoint otherwise."""
        checkpoint = self.checkpoints(run)
        return [str(self.source), str(self.out), checkpoint, str(FILES_PER_BATCH)]

    def check(self, result: CrashResult) -> None:
        """Output == input exactly, by the committed-file reader and by a plain read."""
        context = f"\n{result.summary()}"
        committed = read_committed(str(self.out))
        count = assert_exactly_once(
            committed.column("seq"), self.expected, what="read_committed" + context
        )
        plain = ds.dataset(str(self.out), format="parquet").to_table()
        assert_exactly_once(plain.column("seq"), self.expected, what="pyarrow dataset" + context)
        assert pc.all(
            pc.equal(plain.column("tripled"), pc.multiply(plain.column("seq"), 3))
        ).as_py()
        assert count.seen == len(self.expected)


@pytest.fixture
def files_job(tmp_path: Path) -> FilesJob:
    return FilesJob(tmp_path / "job")


def test_job_killed_at_every_named_point_and_at_random_then_tasks_killed(
    crash_harness: CrashHarness, files_job: FilesJob
) -> None:
    """Eight SIGKILLs of the whole job (six protocol points, two random moments), each
    restart spelling the checkpoint otherwise; the run that completes loses its task
    twelve times (after the write and after the vote, in six batches), and Spark retries."""
    checkpoint = files_job.checkpoint
    kills = [
        at_point("source.after_read"),
        at_point("sink.after_write", batch=1),
        at_point("sink.after_pre_commit", batch=2, partition=0),
        at_point("driver.before_commit", batch=3),
        at_point("driver.mid_commit", batch=4),
        at_point("driver.after_commit", batch=5),
        # A batch can take well under a second on an idle machine: a short window and
        # the task kills four batches after the last trigger keep every kill ahead of the job.
        at_random((0.0, 1.0), when=batch_started(checkpoint, 6)),
        at_random((0.0, 1.0), when=batch_started(checkpoint, 11)),
        task_kills(["sink.after_write", "sink.after_pre_commit"], range(15, 21)),
    ]
    result = crash_harness.run(JOB, files_job.args, kills)
    assert result.all_fired, result.summary()
    assert result.kills == 20
    assert result.exit_codes == [-9] * 8 + [0]
    files_job.check(result)


@pytest.mark.cluster
def test_standalone_cluster_loses_its_driver_then_an_executor(
    cluster_harness: CrashHarness, files_job: FilesJob
) -> None:
    """On two executors of a standalone cluster: the driver killed at a protocol point
    and at random, then an executor killed in the run that completes."""
    checkpoint = files_job.checkpoint
    result = cluster_harness.run(
        JOB,
        files_job.args,
        [
            at_point("driver.mid_commit", batch=2),
            at_random((0.0, 2.0), when=batch_started(checkpoint, 5)),
            at_random((0.0, 2.0), target="executor", when=batch_started(checkpoint, 9)),
        ],
    )
    assert result.all_fired, result.summary()
    assert result.exit_codes == [-9, -9, 0]
    files_job.check(result)
