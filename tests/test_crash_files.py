"""Crash tests of the file sink: firesteel.files (or firesteel.kafka) source -> map -> file sink.

Each test feeds sequence-numbered Parquet files to ``firesteel/testing/scripts/files_job.py``
(exactly-once, several files per micro-batch), kills it with SIGKILL at named
protocol points, at random times, or kills tasks and executors, lets the
harness restart it from its checkpoint until it completes, and then counts
the output twice, through ``read_committed`` and through a plain pyarrow
dataset read of the output folder: 0 lost, 0 duplicated.

The kill test runs twice: files in, output in a local folder; and the same
records from a Kafka topic of two partitions (the suite's broker), output on the
S3 API server (``s3a://``, settings as the session's ``spark.hadoop.fs.s3a.*``;
Spark's checkpoint stays local, the wheel has no S3A jar). Both stores go through the
same commit protocol (``firesteel.core.storage``), so the path's eight whole-job
kills and twelve task kills are split between them, four and six each, every
protocol point hit once (:data:`KILL_POINTS`) rather than each store paying a
second full loop of JVM starts (issue 30). On S3 the server is restarted
between the kill inside batch 3's commit (manifest written, nothing published)
and the restart that publishes it, and the output is also counted with
pyarrow's own S3 filesystem and a boto3 listing.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
from files_helpers import write_sequence_files
from pyarrow import fs

from firesteel.files import read_committed
from firesteel.testing import (
    CrashHarness,
    CrashResult,
    JobFailedError,
    Spellings,
    assert_exactly_once,
    at_point,
    at_random,
    batch_started,
    task_kills,
)
from firesteel.testing.kafka import create_topic, produce
from firesteel.testing.proxy import DroppingProxy
from firesteel.testing.s3 import S3Server
from firesteel.testing.scripts import script

pytestmark = pytest.mark.crash

JOB = script("files_job")
FILES = 39
ROWS_PER_FILE = 20
FILES_PER_BATCH = 3
BATCHES = FILES // FILES_PER_BATCH
KILL_POINTS = {
    "local": (
        at_point("source.after_read"),
        at_point("sink.after_pre_commit", batch=1, partition=0),
        at_point("driver.after_commit", batch=2),
    ),
    "s3": (
        at_point("sink.after_write", batch=1),
        at_point("driver.before_commit", batch=2),
        at_point("driver.mid_commit", batch=3),
    ),
}
"""Each store's protocol-point kills: together every point of the file sink's protocol."""
S3_RESTART_BEFORE_RUN = 3
"""The run after the kill inside batch 3's commit starts on a restarted S3 server."""


class FilesJob:
    """Input, output and checkpoint folders of one crash test (output local or on S3)."""

    def __init__(
        self, root: Path, s3: S3Server | None = None, endpoint: str = "", kafka: str = ""
    ) -> None:
        self.source = root / "in"
        self.input = str(self.source)
        """The job's input argument: the folder, or ``kafka://<bootstrap>/<topic>``."""
        self.per_batch = FILES_PER_BATCH
        self.s3 = s3
        self.endpoint = endpoint
        """Where the job reaches the S3 server (a proxy's address), if not directly."""
        self.bucket = ""
        if s3 is None:
            self.out = str(root / "out")
        else:
            self.bucket = s3.create_bucket(f"crash-files-{uuid.uuid4().hex[:12]}")
            self.out = f"s3a://{self.bucket}/out"
        self.checkpoint = root / "ck"
        self.checkpoints = Spellings(self.checkpoint)
        if kafka:
            topic = create_topic(kafka, 2)
            self.expected = range(FILES * ROWS_PER_FILE)
            records = [json.dumps({"seq": i, "text": f"r{i}"}).encode() for i in self.expected]
            produce(kafka, topic, records)
            self.input = f"kafka://{kafka}/{topic}"
            self.per_batch = FILES_PER_BATCH * ROWS_PER_FILE
        else:
            self.expected = write_sequence_files(
                self.source, FILES, ROWS_PER_FILE, lambda seqs: {"text": [f"r{i}" for i in seqs]}
            )

    def args(self, run: int) -> list[str]:
        """Run ``run``'s arguments: each restart spells the checkpoint otherwise; on S3 the
        settings go as the session's ``spark.hadoop.fs.s3a.*``, and the server restarts once."""
        checkpoint = self.checkpoints(run)
        args = [self.input, self.out, checkpoint, str(self.per_batch)]
        if self.s3 is None:
            return args
        if run == S3_RESTART_BEFORE_RUN:
            self.s3.restart()
        settings = {
            **self.s3.settings(),
            **({"fs.s3a.endpoint": self.endpoint} if self.endpoint else {}),
        }
        return args + [f"spark.hadoop.{k}={v}" for k, v in settings.items()]

    def check(self, result: CrashResult) -> None:
        """Output == input exactly, by the committed-file reader and by plain reads."""
        context = f"\n{result.summary()}"
        storage = self.s3.settings() if self.s3 is not None else None
        committed = read_committed(self.out, storage)
        count = assert_exactly_once(
            committed.column("seq"), self.expected, what="read_committed" + context
        )
        if self.s3 is None:
            plain = ds.dataset(self.out, format="parquet").to_table()
        else:
            plain = ds.dataset(
                f"{self.bucket}/out", format="parquet", filesystem=self._plain_s3()
            ).to_table()
            self._check_listing(context)
        assert_exactly_once(plain.column("seq"), self.expected, what="pyarrow dataset" + context)
        assert pc.all(
            pc.equal(plain.column("tripled"), pc.multiply(plain.column("seq"), 3))
        ).as_py()
        assert count.seen == len(self.expected)

    def _plain_s3(self) -> fs.S3FileSystem:
        assert self.s3 is not None
        return self.s3.filesystem()

    def _check_listing(self, context: str) -> None:
        """boto3: outside ``_firesteel/`` only committed part files, one per batch."""
        assert self.s3 is not None
        pages = (
            self.s3.client()
            .get_paginator("list_objects_v2")
            .paginate(Bucket=self.bucket, Prefix="out/")
        )
        keys = [item["Key"] for page in pages for item in page.get("Contents", [])]
        data = sorted(k for k in keys if not k.startswith("out/_firesteel/"))
        assert all(k.startswith("out/part-") and k.endswith(".parquet") for k in data), data
        batches = [k.split("-")[1] for k in data]
        assert len(set(batches)) == BATCHES, f"{data}{context}"


@pytest.fixture(params=["local", "s3"])
def files_job(request: pytest.FixtureRequest, tmp_path: Path) -> FilesJob:
    """Files in, output local; or Kafka in (the suite's broker), output on the S3 server."""
    if request.param == "local":
        return FilesJob(tmp_path / "job")
    s3, bootstrap = request.getfixturevalue("s3_server"), request.getfixturevalue("bootstrap")
    return FilesJob(tmp_path / "job", s3, kafka=bootstrap)


def test_job_killed_at_protocol_points_and_at_random_then_tasks_killed(
    crash_harness: CrashHarness, files_job: FilesJob, request: pytest.FixtureRequest
) -> None:
    """Four SIGKILLs of the whole job (this store's three protocol points, one random
    moment), each restart spelling the checkpoint otherwise; the run that completes
    loses its task six times (after the write and after the vote, in three batches),
    and Spark retries. Output local, or on S3 with the server restarted once between a
    kill and a restart."""
    kills = [
        *KILL_POINTS[request.node.callspec.params["files_job"]],
        # A batch can take well under a second on an idle machine: a short window and
        # the task kills four batches after the random trigger keep every kill ahead of the job.
        at_random((0.0, 1.0), when=batch_started(files_job.checkpoint, 5)),
        task_kills(["sink.after_write", "sink.after_pre_commit"], range(9, 12)),
    ]
    result = crash_harness.run(JOB, files_job.args, kills)
    assert result.all_fired, result.summary()
    assert result.kills == 10
    assert result.exit_codes == [-9] * 4 + [0]
    files_job.check(result)


def test_a_store_dropping_every_connection_fails_the_query_naming_it_then_restart_is_exact(
    crash_harness: CrashHarness, tmp_path: Path, s3_server: S3Server
) -> None:
    """The job reaches the S3 server through a proxy that resets every connection from the
    moment batch 3 starts (its files uploading, or its commit publishing) until the job has
    failed: the query fails with an error naming the bucket, loses nothing, and a restart
    once the store answers again completes exactly."""
    with DroppingProxy(s3_server.port) as proxy:
        files_job = FilesJob(tmp_path / "job", s3_server, endpoint=proxy.endpoint)
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
                crash_harness.attempt(JOB, files_job.args(0), None)
        finally:
            failed_run.set()
            refuser.join()
        assert proxy.dropped > 0
        assert "StorageError" in str(failure.value) and files_job.bucket in str(failure.value)
        result = crash_harness.run(JOB, lambda run: files_job.args(run + 1))
    assert result.exit_codes == [0]
    files_job.check(result)


@pytest.mark.cluster
def test_standalone_cluster_loses_its_driver_then_an_executor(
    cluster_harness: CrashHarness, tmp_path: Path, s3_server: S3Server
) -> None:
    """On two executors of a standalone cluster: the driver killed at a protocol point
    and at random, then an executor killed in the run that completes. The output is on
    the S3 server, so the executors and the driver share no output folder (Spark's
    checkpoint stays local: the wheel has no S3A jar)."""
    files_job = FilesJob(tmp_path / "job", s3_server)
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
