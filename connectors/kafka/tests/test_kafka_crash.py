"""Kafka -> map -> Kafka under SIGKILL at protocol points and at random times.

The map job runs the sink's default ``exactly.once.mode=write-ahead`` with a
``repartition(n)`` that changes on every restart; the state job runs
``exactly.once.mode=in-task`` with its partition count kept. The two exactly-once jobs
run as two queries of one driver (:meth:`~firesteel.testing.CrashHarness.run_together`),
so each whole-job SIGKILL crashes both and each restart of Spark serves both (issue 30).

The jobs run in the documented default configuration (the consumer-group marker
only) on a real Apache Kafka broker, and the output is judged twice: by a plain
``read_committed`` consumer (the broker's own isolation) and from the raw log
(:func:`firesteel.testing.kafka.read_log`, which applies commit/abort markers
itself); both must agree. One raw-log checker
runs while the job is being killed, one at the end. Every restart spells the
checkpoint (and state) folder otherwise than the run it recovers: plain, with a
trailing slash, as a ``file://`` URI, through a symlink.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from kafka_support import check_with_read_committed

from firesteel.core.logs import LEVEL_ENV
from firesteel.testing import (
    CrashHarness,
    HarnessError,
    Part,
    Spellings,
    assert_at_least_once,
    assert_exactly_once,
    at_point,
    at_random,
    batch_started,
    in_one_run,
    task_kills,
)
from firesteel.testing.kafka import create_topic, produce, read_committed, read_log
from firesteel.testing.kafka.scripts import script
from firesteel.testing.s3 import S3Server
from firesteel.testing.scripts import script as files_script

JOBS = Path(__file__).parent / "jobs"
JOB = script("map_job")
RECORDS = 1440
PARTITIONS = 4

# Each run starts a JVM (~20 s on a loaded machine); two dozen runs outlive the default timeout.
pytestmark = [pytest.mark.crash, pytest.mark.timeout(3600)]

# The task kills of the write-ahead query's last run, whose sends run as Spark tasks
# (send.connect): two points of its write tasks and one of its send tasks, in its batches
# 20-23 (24 batches of 60 records).
MAP_WRITE_TASK_POINTS = ["sink.after_write", "sink.after_pre_commit"]
MAP_SEND_TASK_POINT = "kafka.after_commit_transaction"
MAP_TASK_BATCHES = range(20, 24)
REPARTITIONS = (4, 2)
"""``repartition(n)`` of the write-ahead job's runs, alternating: every restart changes the
count of the run it recovers, 4 -> 2 and 2 -> 4 in turn."""


def _sequence(values) -> list[int]:
    return [int(v.decode().removeprefix("out-")) for v in values]


LIVE_CHECK_SECONDS = 3.0
"""How often :class:`LiveChecker` reads the log: each read starts new clients and reads the
whole topic in the test's process, which at every second took a good part of a core the
job's restarts need on two cores."""


class LiveChecker:
    """Reads the raw output log every few seconds while the job runs; records violations."""

    def __init__(self, bootstrap: str, topic: str, exactly_once: bool) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.exactly_once = exactly_once
        self.violations: list[str] = []
        self.checks = 0
        self.retries: list[str] = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> LiveChecker:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(60)

    def _loop(self) -> None:
        while not self.stop_event.wait(LIVE_CHECK_SECONDS):
            try:
                view = read_log(self.bootstrap, self.topic)
            except RuntimeError as exc:
                # A fetch racing the job's writes; the next check reads again.
                self.retries.append(str(exc))
                continue
            seen = _sequence(view.values)
            self.checks += 1
            unexpected = [n for n in seen if not 0 <= n < RECORDS]
            if unexpected:
                self.violations.append(f"unexpected values {unexpected[:5]}")
            if self.exactly_once:
                dupes = [n for n, c in Counter(seen).items() if c > 1]
                if dupes:
                    self.violations.append(f"check {self.checks}: duplicates visible {dupes[:5]}")


def _run_at_least_once(bootstrap: str, tmp_path: Path, points: list[str]) -> tuple:
    """Run the map job at-least-once, killed at ``points`` in batches 1, 2, ...; its
    result, live checker and the output log."""
    source = _input_topic(bootstrap, RECORDS)
    target = create_topic(bootstrap, PARTITIONS)
    checkpoint = tmp_path / "checkpoint"
    kills = [at_point(point, batch=batch) for batch, point in enumerate(points, start=1)]
    spelled = Spellings(checkpoint)
    with (
        CrashHarness(tmp_path / "harness", timeout=300) as harness,
        LiveChecker(bootstrap, target, exactly_once=False) as live,
    ):
        result = harness.run(
            JOB,
            lambda run: [
                bootstrap,
                source,
                target,
                spelled(run),
                "at-least-once",
                "write-ahead",
                "0",
                "driver",
            ],
            kills,
            max_runs=len(kills) + 3,
        )
    view = read_log(bootstrap, target)
    check_with_read_committed(bootstrap, target, view)
    return result, live, view


def test_at_least_once_loses_nothing_under_kills(bootstrap, tmp_path):
    """Killed after records were produced but not flushed, and after the flush before the
    vote: nothing lost. Two kills, not eight: an at-least-once path (issue 30 keeps eight
    whole-job kills for the exactly-once ones, which run the same source)."""
    points = ["kafka.after_produce", "kafka.after_flush"]
    result, live, view = _run_at_least_once(bootstrap, tmp_path, points)
    assert result.all_fired and result.kills == 2, result.summary()
    assert not live.violations, live.violations
    assert_at_least_once(_sequence(view.values), range(RECORDS), "output")


STATE_RECORDS = 1600
"""Twenty batches of the state job's 80 records: the whole-job kills take batches 1-10,
the state query's task kills its batches 16-19 (see :func:`together_kills`)."""
STATE_TASK_POINTS = [
    "state.after_snapshot",
    "kafka.after_flush",
    "kafka.after_commit_transaction",
]


STATE_TASK_BATCHES = range(16, 20)
FILES_TASK_POINTS = ["sink.after_write", "sink.after_pre_commit"]
FILES_TASK_BATCHES = range(37, 40)
"""The file-sink query's last three batches. It runs about twice as fast as the map query
(no state, no transactions): when the last random kill strikes (the map's batch 11) it has
been seen at batch 16 to 22, so its task kills aim well past that."""


COMMIT_WINDOWS = [["files", "map"], ["map", "state"], ["files", "map", "state"]]
"""The queries each gathered kill of :func:`together_kills` lands inside, in order."""


def together_kills(map_checkpoint: Path) -> list:
    """Eight whole-job kills shared by the map (write-ahead), state (in-task) and file-sink
    queries (issue 30's eight: each restart costs every query's start-up again), then
    twelve task kills aimed at each of the first two and six at the third.
    ``wal.after_send`` (the map's write-ahead commit) is aimed at the map's batch 1;
    ``state.after_snapshot`` at the state query's first snapshot of its run, whichever batch
    it resumes at: with nothing to send, it may be batches ahead of the map (it was at
    batch 2 when the map's batch 1 sent, on a quiet machine). The kills inside
    the batches' commits gather the queries they are aimed at (each waits at the point, in
    its own batch, until all are there: one kill inside each of their commits), so every
    query is killed at least twice inside its commit (:data:`COMMIT_WINDOWS`): the map
    between the transactions of its sends, the file sink mid-publish, the state query with
    one task's transaction committed and others not; all three between the sink's commit and
    Spark's ``commits/N``. Random kills count in the map query's batches."""
    return [
        at_point("source.after_read"),
        at_point("wal.after_send", batch=1),
        at_point("state.after_snapshot", query="state"),
        at_point("driver.mid_commit", query=COMMIT_WINDOWS[0]),
        at_random((0.2, 1.0), when=batch_started(map_checkpoint, 4)),
        at_point("kafka.after_commit_transaction", query=COMMIT_WINDOWS[1]),
        at_point("driver.after_commit", query=COMMIT_WINDOWS[2]),
        at_random((0.2, 1.0), when=batch_started(map_checkpoint, 11)),
        in_one_run(
            task_kills(MAP_WRITE_TASK_POINTS, MAP_TASK_BATCHES, query="map"),
            # The map's send tasks run as a job of its Spark Connect server, which Spark
            # describes as that server's, not the query's: aimed by batch instead, at
            # batches the other queries (20 batches at most) never reach.
            task_kills([MAP_SEND_TASK_POINT], MAP_TASK_BATCHES),
            task_kills(STATE_TASK_POINTS, STATE_TASK_BATCHES, query="state"),
            task_kills(FILES_TASK_POINTS, FILES_TASK_BATCHES, query="files"),
        ),
    ]


def _input_topic(bootstrap: str, records: int) -> str:
    """A topic of :data:`PARTITIONS` partitions holding ``0 .. records - 1`` round robin."""
    topic = create_topic(bootstrap, PARTITIONS)
    for partition in range(PARTITIONS):
        values = [str(i).encode() for i in range(partition, records, PARTITIONS)]
        produce(bootstrap, topic, values, partition=partition)
    return topic


FILES_RECORDS = 2400
"""The file-sink query's input: 40 batches of 60 JSON records from a topic of two partitions."""


def _files_on_s3_part(bootstrap: str, s3: S3Server, root: Path) -> tuple[Part, str]:
    """Kafka -> map -> the file sink with its output on the S3 server: the part and its
    output bucket (the session reaches the server through ``spark.hadoop.fs.s3a.*``)."""
    topic = create_topic(bootstrap, 2)
    produce(
        bootstrap,
        topic,
        [json.dumps({"seq": i, "text": f"r{i}"}).encode() for i in range(FILES_RECORDS)],
    )
    bucket = s3.create_bucket(f"kafka-files-{uuid.uuid4().hex[:12]}")
    checkpoints = Spellings(root / "files-checkpoint")
    part = Part(
        "files",
        files_script("files_job"),
        lambda run: [f"kafka://{bootstrap}/{topic}", f"s3a://{bucket}/out", checkpoints(run), "60"],
        env=lambda run: s3.job_env(),
    )
    return part, bucket


def _check_files_on_s3(s3: S3Server, bucket: str) -> None:
    """pyarrow's dataset reader over the bucket, and a boto3 listing: every record once,
    and outside ``_firesteel/`` only committed part files."""
    table = ds.dataset(f"{bucket}/out", format="parquet", filesystem=s3.filesystem()).to_table()
    assert_exactly_once(table.column("seq").to_pylist(), range(FILES_RECORDS), "file sink on S3")
    assert table.column("tripled").to_pylist() == [
        3 * seq for seq in table.column("seq").to_pylist()
    ]
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="out/")
    keys = [item["Key"] for page in pages for item in page.get("Contents", [])]
    data = [key for key in keys if not key.startswith("out/_firesteel/")]
    assert data and all(k.startswith("out/part-") and k.endswith(".parquet") for k in data), data


def test_map_state_and_file_sink_on_s3_are_exactly_once_under_shared_kills(
    bootstrap, s3_server, tmp_path
):
    """Both exactly-once modes in one driver (:meth:`CrashHarness.run_together`), so every
    whole-job SIGKILL crashes both queries: Kafka -> map -> ``repartition(n)`` -> Kafka in
    the default ``exactly.once.mode=write-ahead``, each restart with another ``n`` than the
    run it recovers (4 -> 2 and 2 -> 4 in turn), and Kafka -> keyed state -> Kafka in
    ``in-task`` mode. Eight whole-job kills, then twelve task kills of each query that Spark
    retries in the run that completes. In the write-ahead query every kill in a commit's
    sends re-runs the batch with the other count: its plan rolls forward, and each
    segment's send fences the killed one and reads its marker; the last run sends through
    its own Spark Connect server (``send.connect``), one Spark task per segment. In the
    state query each task retry restores the state its killed attempt may have
    snapshotted, fences the killed producer and reads its marker. A third query reads a
    topic of JSON records and writes them through the file sink to the S3 server."""
    map_source, map_target = _input_topic(bootstrap, RECORDS), create_topic(bootstrap, PARTITIONS)
    state_source = _input_topic(bootstrap, STATE_RECORDS)
    state_target = create_topic(bootstrap, PARTITIONS)
    files_part, bucket = _files_on_s3_part(bootstrap, s3_server, tmp_path)
    map_checkpoint = tmp_path / "map-checkpoint"
    kills = together_kills(map_checkpoint)
    whole_job_kills = len(kills) - 1
    map_checkpoints = Spellings(map_checkpoint)
    checkpoints, states = Spellings(tmp_path / "checkpoint"), Spellings(tmp_path / "state")

    def send(run: int) -> str:
        return "executors" if run >= whole_job_kills else "driver"

    map_part = Part(
        "map",
        JOB,
        lambda run: [
            bootstrap,
            map_source,
            map_target,
            map_checkpoints(run),
            "exactly-once",
            "write-ahead",
            str(REPARTITIONS[run % 2]),
            send(run),
        ],
        # The fan-out logs where its tasks ran at INFO.
        env=lambda run: {LEVEL_ENV: "INFO"} if send(run) == "executors" else {},
    )
    state_part = Part(
        "state",
        script("state_job"),
        lambda run: [
            bootstrap,
            state_source,
            state_target,
            checkpoints(run),
            states(run),
            "in-task",
        ],
    )
    with (
        CrashHarness(tmp_path / "harness", timeout=300) as harness,
        LiveChecker(bootstrap, map_target, exactly_once=True) as live,
    ):
        # The map part first: its session settings (the Spark Connect server) need a new session.
        result = harness.run_together(
            [map_part, state_part, files_part], kills, max_runs=len(kills) + 3
        )
    assert result.all_fired, result.summary()
    assert result.kills == whole_job_kills + 30, result.summary()
    assert result.exit_codes == [-9] * whole_job_kills + [0], result.summary()
    assert list(result.gathered.values()) == COMMIT_WINDOWS, result.gathered

    assert live.checks > 0
    assert not live.violations, live.violations
    view = read_log(bootstrap, map_target)
    assert_exactly_once(_sequence(view.values), range(RECORDS), "committed map output")
    check_with_read_committed(bootstrap, map_target, view)
    assert not view.pending, f"{len(view.pending)} records in transactions never resolved"
    assert not set(_sequence(r.value for r in view.aborted)) - set(range(RECORDS))
    assert "tasks ran on" in result.logs[-1].read_text(), "the last run's sends were not tasks"

    view = read_log(bootstrap, state_target)
    rows = [v.decode().split(":") for v in view.values]
    assert_exactly_once([int(seq) for seq, _, _ in rows], range(STATE_RECORDS), "state output")
    check_with_read_committed(bootstrap, state_target, view)
    ranks: dict[str, list[int]] = {}
    for _, key, rank in rows:
        ranks.setdefault(key, []).append(int(rank))
    for key, got in ranks.items():
        assert sorted(got) == list(range(1, len(got) + 1)), f"state of {key} lost or doubled"
    assert not view.pending
    _check_files_on_s3(s3_server, bucket)


def _latest_job_killed_then_restarted(
    bootstrap: str, tmp_path: Path, kill, check_killed, produced_while_down: list[bytes]
):
    """Run the startingOffsets=latest job over a topic holding two records until ``kill``
    fires, ``check_killed(checkpoint)``, produce ``produced_while_down``, restart it to the
    end; the completed run's result and the output topic."""
    source = create_topic(bootstrap, 2)
    target = create_topic(bootstrap, 2)
    produce(bootstrap, source, [b"before-0", b"before-1"])
    checkpoint = tmp_path / "checkpoint"
    args = [bootstrap, source, target, str(checkpoint)]
    job = JOBS / "kafka_latest_job.py"
    with CrashHarness(tmp_path / "harness", timeout=300) as harness:
        with pytest.raises(HarnessError, match="no run completed"):
            harness.run(job, args, [kill], max_runs=1)
        check_killed(checkpoint)
        produce(bootstrap, source, produced_while_down)
        result = harness.run(job, args, [], max_runs=1)
    assert result.restarts == 0, result.summary()
    return target


def test_latest_start_survives_a_crash_before_batch_0_commits(bootstrap, tmp_path):
    """startingOffsets=latest (the default): records produced after the query resolved its
    start, while it is down after a kill inside batch 0, are read after the restart; records
    from before the start never are."""

    def batch_0_logged_not_committed(checkpoint: Path) -> None:
        assert (checkpoint / "offsets" / "0").exists()
        assert not (checkpoint / "commits" / "0").exists()

    middle = [f"middle-{i}".encode() for i in range(6)]
    target = _latest_job_killed_then_restarted(
        bootstrap,
        tmp_path,
        at_point("driver.after_commit", batch=0),
        batch_0_logged_not_committed,
        middle,
    )
    view = read_log(bootstrap, target)
    assert sorted(view.values) == sorted(middle)
    check_with_read_committed(bootstrap, target, view)


def test_latest_start_survives_a_crash_before_offsets_0_is_written(bootstrap, tmp_path):
    """Killed after the source resolved startingOffsets=latest but before Spark wrote
    offsets/0: the restart reads every record produced while the query was down, once,
    and none from before its first start (counted by a plain read_committed consumer)."""

    def offsets_0_not_written(checkpoint: Path) -> None:
        assert not (checkpoint / "offsets" / "0").exists()

    down = [f"down-{i}".encode() for i in range(6)]
    target = _latest_job_killed_then_restarted(
        bootstrap, tmp_path, at_point("kafka.after_initial_offset"), offsets_0_not_written, down
    )
    assert sorted(r.value for r in read_committed(bootstrap, target)) == sorted(down)


def test_the_state_soak_ranks_follow_each_input_partition_not_the_global_order() -> None:
    from firesteel.testing.kafka.soak import misranked_per_partition

    # Key k0 gets seqs 0, 5, 10, 15, 20, 25 (partitions 0, 2, 1, 0, 2, 1): one batch read
    # 0, 15 and 5 first, the next the rest, so ranks follow each partition, not seq order.
    good = [["0", "k0", "1"], ["15", "k0", "3"], ["5", "k0", "2"], ["20", "k0", "4"]]
    good += [["10", "k0", "5"], ["25", "k0", "6"]]
    assert misranked_per_partition(good) == 0
    # A state update lost: batch 2 counted on from 2, not 3.
    lost = [*good[:3], ["20", "k0", "3"], ["10", "k0", "4"], ["25", "k0", "5"]]
    assert misranked_per_partition(lost) == 1
    reordered = [["0", "k0", "2"], ["15", "k0", "1"]]  # partition 0 out of order
    assert misranked_per_partition(reordered) == 1
