"""Crash tests of the file sink beyond its kill loop: a store dropping connections, a cluster.

The file path's kills at protocol points, at random and of tasks run in
``tests/test_crash_together.py`` (with the keyed-state and write-ahead-log paths,
in one driver). Here the job (:class:`crash_paths.FilesJob`) meets an S3 server
that drops every connection (the output counted through ``read_committed``, a plain
pyarrow dataset read and a boto3 listing), and the keyed-state job
(:class:`crash_paths.StateJob`) runs on a standalone cluster losing its driver and an
executor, state and output on the S3 server: 0 lost, 0 duplicated.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from crash_paths import FILES_JOB, STATE_JOB, FilesJob, StateJob

from firesteel.testing import CrashHarness, JobFailedError, at_point, at_random, batch_started
from firesteel.testing.proxy import DroppingProxy
from firesteel.testing.s3 import S3Server

pytestmark = pytest.mark.crash


def test_a_store_dropping_every_connection_fails_the_query_naming_it_then_restart_is_exact(
    crash_harness: CrashHarness, tmp_path: Path, s3_server: S3Server
) -> None:
    """The job reaches the S3 server through a proxy that resets every connection from the
    moment batch 3 starts (its files uploading, or its commit publishing) until the job has
    failed, longer than the job's outage window (``fs.s3a.retry.timeout.ms``, 3 s here): the
    query fails with an error naming the bucket and the setting, loses nothing, and a
    restart once the store answers again completes exactly."""
    with DroppingProxy(s3_server.port) as proxy:
        files_job = FilesJob(
            tmp_path / "job",
            s3_server,
            endpoint=proxy.endpoint,
            settings={"fs.s3a.retry.timeout.ms": "3000"},
        )
        third_batch = batch_started(files_job.checkpoint, 3)
        failed_run = threading.Event()

        def refuse_from_batch_3() -> None:
            while not third_batch() and not failed_run.is_set():
                time.sleep(0.05)
            with proxy.refusing():
                failed_run.wait()

        refuser = threading.Thread(target=refuse_from_batch_3)
        refuser.start()
        try:
            with pytest.raises(JobFailedError) as failure:
                crash_harness.attempt(FILES_JOB, files_job.args(0), None)
        finally:
            failed_run.set()
            refuser.join()
        assert proxy.dropped > 0
        assert "StorageError" in str(failure.value) and files_job.bucket in str(failure.value)
        assert "fs.s3a.retry.timeout.ms=3000" in str(failure.value)
        result = crash_harness.run(FILES_JOB, lambda run: files_job.args(run + 1))
    assert result.exit_codes == [0]
    files_job.check(result)


@pytest.mark.cluster
def test_standalone_cluster_loses_its_driver_then_an_executor(
    cluster_harness: CrashHarness, tmp_path: Path, s3_server: S3Server
) -> None:
    """On two executors of a standalone cluster, files -> keyed state -> the file sink: the
    driver killed after a snapshot and at random, each restart at another parallelism, then
    an executor killed in the run that completes. The state and the output are on the S3
    server, so the executors and the driver share no folder (Spark's checkpoint stays on
    the driver: the wheel has no S3A jar)."""
    # Seven batches: three kills need no more, and each costs a batch of JVM work on two
    # one-core executors.
    job = StateJob(tmp_path / "job", s3_server, files=21)
    checkpoint = job.checkpoint
    result = cluster_harness.run(
        STATE_JOB,
        job.args,
        [
            at_point("state.after_snapshot", batch=1),
            at_random((0.0, 2.0), when=batch_started(checkpoint, 3)),
            at_random((0.0, 2.0), target="executor", when=batch_started(checkpoint, 5)),
        ],
        env=lambda run: s3_server.job_env(),
    )
    assert result.all_fired, result.summary()
    assert result.exit_codes == [-9, -9, 0]
    job.check(result)
