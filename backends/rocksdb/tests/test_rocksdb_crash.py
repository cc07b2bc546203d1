"""Crash tests of the RocksDB backend: SIGKILL during uploads, restores and at random, then count.

The job (``jobs/rocksdb_state_job.py``) ranks sequence-numbered records per key
in RocksDB state and writes through the transactional file sink. After the
harness has killed and restarted it until it completes: every seq appears
exactly once, every record's rank is its position among its key's records
(no state update lost or applied twice), timers fired once per batch, the
checkpoint holds each key's total, and the checkpoint folder holds exactly
what its retained manifests reference (the killed attempts' uploads are gone).
The output is read with pyarrow's dataset reader, not firesteel's. The test
runs twice: with the checkpoints on local disk, and on the S3 server process
(listed and read back with boto3). The path's eight whole-job kills and twelve
task kills are split between the two stores, four and six each: each store is
killed mid-upload and mid-restore, and the commit points and the random moment
are shared out (:data:`KILL_POINTS`), rather than each store paying a second
full loop of JVM starts (issue 30).
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from firesteel.backends.inspect import read_state
from firesteel.core.storage import StorageConfig
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
from firesteel.testing.ranked import RankedRun
from firesteel.testing.s3 import S3Server

pytestmark = [pytest.mark.crash, pytest.mark.timeout(600)]

JOB = Path(__file__).parent / "jobs" / "rocksdb_state_job.py"
FILES = 36
ROWS_PER_FILE = 25
FILES_PER_BATCH = 3
BATCHES = FILES // FILES_PER_BATCH
KEYS = 7


def key_of(seq: int) -> str:
    return f"k{(seq * 5) % KEYS}"


PARALLELISM = (2, 3, 1, 4, 2)
"""The operator's parallelism in each run: every restart moves key-group ranges."""
SHARED_POINTS = (at_point(MID_UPLOAD, batch=1, partition=0), at_point(MID_RESTORE, batch=1))
KILL_POINTS = {
    "local": (*SHARED_POINTS, at_point("driver.before_commit", batch=2)),
    "s3": (
        *SHARED_POINTS,
        at_point("driver.mid_commit", batch=2),
        at_point("driver.after_commit", batch=3),
    ),
}
"""Each store's protocol-point kills: both are killed mid-upload and mid-restore."""
"""The operator's parallelism in each run: every restart rescales the key groups."""


class RocksJob:
    """The job's input and locations; with ``s3``, its checkpoints live in a bucket on the
    server, spelled ``s3a://`` and ``s3://`` on alternate restarts, and the session
    reaches it through ``spark.hadoop.fs.s3a.*``."""

    def __init__(self, root: Path, s3: S3Server | None = None) -> None:
        self.source = root / "in"
        self.out = root / "out"
        self.checkpoint = root / "ck"
        self.state = root / "state"
        self.local = root / "local"
        self.checkpoints = Spellings(self.checkpoint)
        self.s3 = s3
        self.bucket = s3.create_bucket(f"rocksdb-crash-{uuid.uuid4().hex[:8]}") if s3 else ""
        self.states = s3.spellings(self.bucket, "state") if s3 else Spellings(self.state)
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
        run = RankedRun(self.expected, key_of, BATCHES, context)
        # pyarrow's dataset reader, not firesteel's: it sees every visible file.
        run.assert_output(ds.dataset(str(self.out), format="parquet").to_table())
        if self.s3:
            location, storage = f"s3a://{self.bucket}/state", StorageConfig.of(self.s3.settings())
        else:
            location, storage = f"file://{self.state}", None
        run.assert_state(read_state(location, operator="rank", storage=storage))
        self.check_storage(context)

    def stored(self) -> dict[str, Callable[[], bytes]]:
        """The operator's stored files by path relative to its folder, each with a reader:
        local files, or the bucket's objects listed and read with boto3."""
        if self.s3 is None:
            base = self.state / "rank"
            return {str(p.relative_to(base)): p.read_bytes for p in base.rglob("*") if p.is_file()}
        client, prefix = self.s3.client(), "state/rank/"
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        # pyarrow leaves a zero-byte folder marker ("shared/") where it deleted a folder's
        # last object: a marker, not a stored file.
        keys = [
            item["Key"]
            for page in pages
            for item in page.get("Contents", [])
            if not item["Key"].endswith("/")
        ]
        return {
            key[len(prefix) :]: functools.partial(
                lambda k: client.get_object(Bucket=self.bucket, Key=k)["Body"].read(), key
            )
            for key in keys
        }

    def check_storage(self, context: str) -> None:
        """Only retained versions remain, and shared/ holds exactly the files they reference
        (files of the last batch's attempts aside, which the next batch would collect)."""
        stored_files = self.stored()
        versions = sorted({path.split("/")[0] for path in stored_files if path.startswith("v")})
        assert versions == [f"v{v:012d}" for v in (BATCHES - 2, BATCHES - 1)], context
        manifests = [p for p in stored_files if re.fullmatch(r"v\d{12}/[^/]+\.json", p)]
        referenced = {
            entry["path"].split("/", 1)[1]
            for manifest in manifests
            for entry in json.loads(stored_files[manifest]())["content"]["files"]
            if entry["path"].startswith("shared/")
        }
        stored = {p.split("/", 1)[1] for p in stored_files if p.startswith("shared/")}
        assert referenced <= stored, f"referenced files are missing{context}"
        unreferenced = stored - referenced
        oldest_kept = BATCHES - 2
        stale = sorted(n for n in unreferenced if int(n.lstrip(".")[:12]) < oldest_kept)
        assert not stale, f"files no retained version needs were kept: {stale}{context}"


@pytest.mark.parametrize("storage", ["local", "s3"])
def test_killed_during_upload_restore_and_at_random_then_tasks_killed(
    tmp_path: Path, storage: str, request: pytest.FixtureRequest
) -> None:
    """Four SIGKILLs of the whole job (mid-upload, mid-restore, this store's commit points,
    locally a random moment), each restart at another parallelism, so restores move
    key-group ranges between instances; the run that completes loses a task six times
    (mid-upload, after a write, after a vote) and Spark retries it on the same local
    instances. ``s3``: the checkpoints on the S3 server process, listed and read back with
    boto3."""
    s3 = request.getfixturevalue("s3_server") if storage == "s3" else None
    job = RocksJob(tmp_path / "job", s3)
    random = [at_random((0.0, 1.5), when=batch_started(job.checkpoint, 4))] if s3 is None else []
    kills = [
        *KILL_POINTS[storage],
        *random,
        task_kills([MID_UPLOAD, "sink.after_write", "sink.after_pre_commit"], range(8, 10)),
    ]
    with CrashHarness(tmp_path / "harness", timeout=300) as harness:
        result = harness.run(JOB, job.args, kills, env=lambda run: s3.job_env() if s3 else {})
    assert result.all_fired, result.summary()
    assert result.kills == 10
    assert result.exit_codes == [-9] * 4 + [0]
    job.check(result)
