"""The exactly-once paths the crash tests kill: each one's input, job arguments and checks.

Each path is a job script of ``firesteel.testing.scripts`` with its input written
here, its arguments per run (every restart changes what a user changes: the
checkpoint's spelling, the parallelism, the partition count, an ``s3a://`` /
``s3://`` spelling) and a ``check`` that reads the output with a reader that is
not firesteel's. :meth:`part` gives the path as one
:class:`~firesteel.testing.Part` of a group sharing a driver
(``tests/test_crash_together.py``); the file path's other tests run it alone.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from files_helpers import write_sequence_files
from pyarrow import fs

from firesteel.backends.inspect import read_state
from firesteel.core.metrics import read_history
from firesteel.core.storage import StorageConfig
from firesteel.files import read_committed
from firesteel.testing import CrashResult, Part, Spellings, assert_exactly_once
from firesteel.testing.clock import clock_offset
from firesteel.testing.processors import rules_digest
from firesteel.testing.ranked import RankedRun, misranked, ranks_by_key
from firesteel.testing.s3 import S3Server
from firesteel.testing.scripts import script
from firesteel.testing.scripts.wal_target import (
    read_sends,
    read_sqlite_bodies,
    read_writes,
    resends,
)

ROOT = Path(__file__).resolve().parents[1]
FILES_JOB = script("files_job")
FILES = 39
ROWS_PER_FILE = 20
FILES_PER_BATCH = 3
BATCHES = FILES // FILES_PER_BATCH


class FilesJob:
    """files -> map -> the transactional file sink, output local or on S3."""

    name = "files"

    def __init__(
        self,
        root: Path,
        s3: S3Server | None = None,
        endpoint: str = "",
        settings: dict[str, str] | None = None,
    ) -> None:
        self.source = root / "in"
        self.s3 = s3
        self.endpoint = endpoint
        """Where the job reaches the S3 server (a proxy's address), if not directly."""
        self.settings = settings or {}
        """More ``fs.s3a.*`` settings of the job (``fs.s3a.retry.timeout.ms``)."""
        self.bucket = ""
        if s3 is None:
            self.out = str(root / "out")
        else:
            self.bucket = s3.create_bucket(f"crash-files-{uuid.uuid4().hex[:12]}")
            self.out = f"s3a://{self.bucket}/out"
        self.checkpoint = root / "ck"
        self.checkpoints = Spellings(self.checkpoint)
        self.expected = write_sequence_files(
            self.source, FILES, ROWS_PER_FILE, lambda seqs: {"text": [f"r{i}" for i in seqs]}
        )

    def args(self, run: int) -> list[str]:
        """Run ``run``'s arguments: each restart spells the checkpoint otherwise; on S3 the
        settings go as the session's ``spark.hadoop.fs.s3a.*``."""
        args = [str(self.source), self.out, self.checkpoints(run), str(FILES_PER_BATCH)]
        if self.s3 is None:
            return args
        settings = {
            **self.s3.settings(),
            **({"fs.s3a.endpoint": self.endpoint} if self.endpoint else {}),
            **self.settings,
        }
        return args + [f"spark.hadoop.{k}={v}" for k, v in settings.items()]

    def part(self) -> Part:
        """This path as a part of a group sharing a driver."""
        return Part(self.name, FILES_JOB, self.args)

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
        self.check_metrics(context)

    def check_metrics(self, context: str) -> None:
        """The batch records count every input row once and every batch once, however often
        a batch ran before its commit."""
        commits = [p for p in (self.checkpoint / "commits").iterdir() if p.name.isdigit()]
        (records,) = read_history(str(self.checkpoint)).values()
        latest = records[-1]
        assert latest.batch == max(int(p.name) for p in commits), context
        assert latest.totals["input_rows"] == len(self.expected), (latest, context)
        assert latest.totals["batches"] == len(commits) == BATCHES, (latest, context)
        assert sum(r.input_rows for r in records) == len(self.expected), context

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


def read_output(out: str, s3: S3Server | None, bucket: str) -> pa.Table:
    """The Parquet files under ``out`` read by pyarrow's dataset reader (not firesteel's:
    it sees every visible file), through pyarrow's own S3 filesystem for a bucket."""
    if s3 is None:
        return ds.dataset(out, format="parquet").to_table()
    return ds.dataset(f"{bucket}/out", format="parquet", filesystem=s3.filesystem()).to_table()


STATE_JOB = script("state_job")
STATE_FILES = 39
STATE_ROWS_PER_FILE = 25
KEYS = 7
PARALLELISM = (2, 3, 1, 4, 2)
"""The operator's parallelism in each run: every restart rescales the keyed state."""


def key_of(seq: int) -> str:
    """The state path's key of record ``seq``."""
    return f"k{(seq * 5) % KEYS}"


class StateJob:
    """files -> keyed state with timers (filesystem backend) -> the file sink.

    With ``s3``, the state and the output live in a bucket on the server (the state
    spelled ``s3a://`` and ``s3://`` on alternate restarts), and the session reaches it
    through ``spark.hadoop.fs.s3a.*``. From the second restart on, the whole job (Spark's JVM
    included) runs with its wall clock an hour behind, so timers registered before
    must still fire in the next batch."""

    name = "state"
    script = STATE_JOB

    def __init__(self, root: Path, s3: S3Server | None = None, files: int = STATE_FILES) -> None:
        self.source = root / "in"
        self.checkpoint = root / "ck"
        self.state = root / "state"
        self.checkpoints = Spellings(self.checkpoint)
        self.s3 = s3
        self.bucket = s3.create_bucket(f"{self.name}-crash-{uuid.uuid4().hex[:8]}") if s3 else ""
        self.out = f"s3a://{self.bucket}/out" if s3 else str(root / "out")
        self.states = s3.spellings(self.bucket, "state") if s3 else Spellings(self.state)
        self.batches = files // FILES_PER_BATCH
        self.expected = write_sequence_files(
            self.source,
            files,
            STATE_ROWS_PER_FILE,
            lambda seqs: {"key": [key_of(s) for s in seqs]},
        )

    def args(self, run: int) -> list[str]:
        """Run ``run``'s arguments: each restart spells the checkpoint and state otherwise
        and runs the operator at another parallelism."""
        return [
            str(self.source),
            self.out,
            self.checkpoints(run),
            self.states(run),
            str(FILES_PER_BATCH),
            str(PARALLELISM[run % len(PARALLELISM)]),
        ]

    def env(self, run: int) -> Mapping[str, str]:
        """Run ``run``'s environment: from the second restart on, the clock an hour behind."""
        return {
            **(clock_offset(-3600) if run >= 2 else {}),
            **(self.s3.job_env() if self.s3 else {}),
        }

    def part(self) -> Part:
        """This path as a part of a group sharing a driver."""
        return Part(self.name, self.script, self.args, self.env)

    def check(self, result: CrashResult) -> None:
        """Every record ranked once among its key's records, timers fired once per batch,
        the state checkpoint holding each key's total, and what the backend stored."""
        context = f"\n{result.summary()}"
        run = RankedRun(self.expected, key_of, self.batches, context)
        run.assert_output(read_output(self.out, self.s3, self.bucket))
        if self.s3:
            location, storage = f"s3a://{self.bucket}/state", StorageConfig.of(self.s3.settings())
        else:
            location, storage = f"file://{self.state}", None
        run.assert_state(read_state(location, operator="rank", storage=storage))
        self.check_storage(context)

    def check_storage(self, context: str) -> None:
        """On S3, the snapshots are objects of the bucket (boto3's listing)."""
        if self.s3:
            listed = self.s3.client().list_objects_v2(Bucket=self.bucket, Prefix="state/rank/")
            keys = [item["Key"] for item in listed.get("Contents", [])]
            assert any(key.endswith(".snap") for key in keys), f"no snapshot on S3{context}"


ROCKS_JOB = ROOT / "backends" / "rocksdb" / "tests" / "jobs" / "rocksdb_state_job.py"
ROCKS_FILES = 36


class RocksJob(StateJob):
    """files -> keyed state with timers (the RocksDB backend, ``retain=1``) -> the file sink.

    As :class:`StateJob`, with the RocksDB backend's checkpoints where the state was (on S3
    listed and read back with boto3) and its instances in a local folder, and the clock
    kept. Every restart runs the operator at another parallelism, so restores move
    key-group ranges between instances; ``check`` also finds exactly what the retained
    manifests reference in the checkpoint folder (the killed attempts' uploads are gone)."""

    name = "rocksdb"
    script = ROCKS_JOB

    def __init__(self, root: Path, s3: S3Server | None = None) -> None:
        super().__init__(root, s3, files=ROCKS_FILES)
        self.local = root / "local"

    def args(self, run: int) -> list[str]:
        """:meth:`StateJob.args` with the instances' local folder."""
        args = super().args(run)
        return [*args[:4], str(self.local), *args[4:]]

    def env(self, run: int) -> Mapping[str, str]:
        """The S3 server's settings for the session, if the checkpoints are on S3."""
        return self.s3.job_env() if self.s3 else {}

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
        assert versions == [f"v{v:012d}" for v in (self.batches - 2, self.batches - 1)], context
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
        oldest_kept = self.batches - 2
        stale = sorted(n for n in unreferenced if int(n.lstrip(".")[:12]) < oldest_kept)
        assert not stale, f"files no retained version needs were kept: {stale}{context}"


WAL_JOB = script("wal_job")
WAL_FILES = 26
"""Thirteen batches of two files."""
WAL_PARTITIONS = ("4", "2", "3", "1", "3", "2", "1")
"""The partition count of each run, in turn: batch 1 is planned with 4 and re-run with 2."""


class WalUpsertJob:
    """files -> hash partitions -> the write-ahead-log sink -> an upsert target (SQLite).

    With ``s3``, the segments, plans and commit markers live on the S3 server, spelled
    ``s3a://`` and ``s3://`` on alternate restarts and reached through the session's
    ``spark.hadoop.fs.s3a.*``. The first kill of every run must be right after a send of
    batch 1 (``wal.after_send@1:1``, planned with 4 partitions): the re-run of a batch
    must send exactly the segments its first commit planned, never skip one nor re-plan."""

    name = "wal"

    def __init__(self, root: Path, s3: S3Server | None = None) -> None:
        self.source = root / "in"
        write_sequence_files(self.source, WAL_FILES, ROWS_PER_FILE, name="{index:03d}.parquet")
        self.target = root / "target.sqlite"
        self.checkpoint = root / "ck"
        self.s3 = s3
        self.bucket = s3.create_bucket(f"wal-crash-{uuid.uuid4().hex[:8]}") if s3 else ""

    def args(self, run: int) -> list[object]:
        """Run ``run``'s arguments: another partition count each restart."""
        location = [S3Server.spellings(self.bucket, "chk")(run)] if self.s3 else []
        return [
            self.source,
            self.target,
            self.checkpoint,
            "2",
            "upsert",
            "exactly-once",
            WAL_PARTITIONS[run % len(WAL_PARTITIONS)],
            *location,
        ]

    def env(self, run: int) -> Mapping[str, str]:
        """The S3 server's settings for the session, if the log is on S3."""
        return self.s3.job_env() if self.s3 else {}

    def part(self) -> Part:
        """This path as a part of a group sharing a driver."""
        return Part(self.name, WAL_JOB, self.args, self.env)

    def check(self, result: CrashResult) -> None:
        """The table, read with sqlite3, holds every record once with its body; its log of
        writes shows re-sends only where the write-ahead log allows them (a segment sent and
        unrecorded when the job died, at most one per kill); batch 1's planned segments were
        all sent; on S3 only the last plan is left."""
        context = f"\n{result.summary()}"
        bodies = read_sqlite_bodies(str(self.target))
        assert_exactly_once(list(bodies), range(WAL_FILES * ROWS_PER_FILE), what="sqlite" + context)
        assert all(body["seq"] == seq for seq, body in bodies.items())
        found = resends(read_writes(str(self.target)))
        assert found.beyond(result.restarts) == 0, f"{found}{context}"
        assert (1, 1) in found.segments, f"the killed segment was not re-sent{context}"
        sends = Counter((s["batch"], s["partition"]) for s in read_sends(str(self.target)))
        # Batch 1 was planned with 4 segments; its re-run (2 partitions) sends the rest of them.
        assert {p for b, p in sends if b == 1} == {0, 1, 2, 3}, f"{sends}{context}"
        if self.s3:
            # Every batch committed: its segments and the plans before the last are gone.
            last = WAL_FILES // 2 - 1
            listed = self.s3.client().list_objects_v2(Bucket=self.bucket)
            keys = [item["Key"] for item in listed.get("Contents", [])]
            assert not [k for k in keys if k.endswith(".arrow")], keys
            plans = [k for k in keys if "/plans/" in k and k.endswith(".json")]
            assert plans == [f"chk/wal/wal-crash/plans/{last}.json"], keys


BROADCAST_JOB = script("broadcast_job")
BROADCAST_FILES = 26
"""Thirteen batches of two files, one rules file each."""
BROADCAST_ROWS_PER_FILE = 8
BROADCAST_PARALLELISM = (2, 3, 1, 4)
"""The operator's parallelism in each run: every restart rescales the state."""
BROADCAST_MAX_PARALLELISM = 8
"""The job's key groups: each holds a copy of the broadcast map."""


def rule_files(folder: Path, batches: int) -> list[dict[str, int]]:
    """One rules file per batch (two versions of two rules each, the later version first);
    the broadcast map each batch must end with, computed in plain Python."""
    folder.mkdir(parents=True)
    expected: list[dict[str, int]] = []
    current: dict[str, int] = {}
    for batch in range(batches):
        rows = []
        for rule in (f"r{batch % 3}", f"r{(batch + 1) % 3}"):
            rows.append({"rule": rule, "limit": 10 * batch + 1, "version": 2 * batch + 1})
            rows.append({"rule": rule, "limit": 10 * batch, "version": 2 * batch})
        pq.write_table(pa.Table.from_pylist(rows), folder / f"rules-{batch:04d}.parquet")
        for row in sorted(rows, key=lambda r: r["version"]):
            current[row["rule"]] = row["limit"]
        expected.append(dict(current))
    return expected


def broadcast_copies(location: str, operator: str) -> dict[int, dict[str, int]]:
    """The broadcast map stored in each key group, read from the state."""
    stored = read_state(location, operator=operator).to_pandas()
    copies = stored[stored["state"] == "rules"]
    per_group: dict[int, dict[str, int]] = {}
    for group, user_key, value in zip(
        copies["key_group"], copies["user_key"], copies["value"], strict=True
    ):
        per_group.setdefault(int(group), {})[json.loads(user_key)] = int(value)
    return per_group


class BroadcastJob:
    """files + a rules stream (broadcast state) -> keyed ranking (filesystem backend) -> the
    file sink, everything local; every restart runs the operator at another parallelism,
    rescaling the key groups and their broadcast copies."""

    name = "broadcast"

    def __init__(self, root: Path) -> None:
        self.source, self.rules, self.out = root / "in", root / "rules", root / "out"
        self.state = root / "state"
        self.checkpoints, self.states = Spellings(root / "ck"), Spellings(self.state)
        self.expected = write_sequence_files(
            self.source,
            BROADCAST_FILES,
            BROADCAST_ROWS_PER_FILE,
            lambda seqs: {"key": [f"k{s % 5}" for s in seqs]},
        )
        self.maps = rule_files(self.rules, BROADCAST_FILES // 2)

    def args(self, run: int) -> list[str]:
        """Run ``run``'s arguments: another spelling of the checkpoint and the state, and
        another parallelism."""
        return [
            str(self.source),
            str(self.rules),
            str(self.out),
            self.checkpoints(run),
            self.states(run),
            "2",
            str(BROADCAST_PARALLELISM[run % len(BROADCAST_PARALLELISM)]),
        ]

    def part(self) -> Part:
        """This path as a part of a group sharing a driver."""
        return Part(self.name, BROADCAST_JOB, self.args)

    def check(self, result: CrashResult) -> None:
        """Every record once (read with pyarrow) and ranked exactly; every row of batch N,
        in whichever partition, saw the rules of batches 0..N applied in version order; at
        the end every key group holds that map."""
        context = f"\n{result.summary()}"
        committed = ds.dataset(str(self.out), format="parquet").to_table()
        assert_exactly_once(committed.column("seq"), self.expected, what="output" + context)
        assert misranked(ranks_by_key(committed)) == 0, context
        batch_of = BROADCAST_ROWS_PER_FILE * 2
        wrong = [
            row
            for row in committed.to_pylist()
            if row["rules"] != rules_digest(self.maps[row["seq"] // batch_of])
        ]
        assert not wrong, f"{len(wrong)} rows saw another broadcast map, e.g. {wrong[:3]}{context}"
        assert len(set(committed.column("partition").to_pylist())) >= 2, context
        copies = broadcast_copies(f"file://{self.state}", "rules")
        assert copies == dict.fromkeys(range(BROADCAST_MAX_PARALLELISM), self.maps[-1]), context
