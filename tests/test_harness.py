"""The crash-test harness itself: kills, restarts, process cleanup, counting."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pytest

from firesteel.testing import (
    AtPoints,
    CrashHarness,
    HarnessError,
    JobFailedError,
    Part,
    RunTimeoutError,
    assert_at_least_once,
    assert_exactly_once,
    at_point,
    at_random,
    count_sequence,
    in_one_run,
    task_kills,
)
from firesteel.testing.daemon import DAEMON_CONFIG
from firesteel.testing.jvm import CACHE_ENV, driver_archive
from firesteel.testing.processes import gone, wait_gone
from firesteel.testing.workerpython import use_worker_python, worker_python

JOBS = Path(__file__).parent / "jobs"
TOY = JOBS / "toy_job.py"


@pytest.fixture
def toy_harness(tmp_path: Path) -> Iterator[CrashHarness]:
    """A harness for the Spark-free toy jobs: they start no JVM, so they need no class
    archive (making one takes half a minute on a fresh machine)."""
    with CrashHarness(tmp_path / "harness", jvm_archive=False) as harness:
        yield harness


def _helpers_alive(state: Path) -> list[int]:
    pids = [int(line) for line in (state / "helpers").read_text().split()]
    return [pid for pid in pids if not gone(pid)]


def test_point_kills_restart_until_complete(toy_harness: CrashHarness, tmp_path: Path) -> None:
    state = tmp_path / "state"
    result = toy_harness.run(
        TOY,
        [state, 6],
        kills=[at_point("driver.mid_commit", batch=1), at_point("driver.mid_commit", batch=4)],
    )
    assert result.all_fired, result.summary()
    assert result.kills == 2
    assert result.restarts == 2
    assert result.exit_codes == [-9, -9, 0]
    assert sorted(p.name for p in state.glob("step-*")) == [f"step-{i}" for i in range(6)]
    # The helper of each killed run lived in its own session; the harness killed it.
    assert _helpers_alive(state) == []
    assert all(log.exists() for log in result.logs)


def test_point_for_a_committed_batch_does_not_fire(
    toy_harness: CrashHarness, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    result = toy_harness.run(
        TOY,
        [state, 4],
        kills=[at_point("driver.mid_commit", batch=2), at_point("driver.mid_commit", batch=1)],
    )
    assert result.kills == 1
    assert not result.all_fired
    assert result.exit_codes == [-9, 0]


def test_random_kill(toy_harness: CrashHarness, tmp_path: Path) -> None:
    state = tmp_path / "state"
    result = toy_harness.run(TOY, [state, 40, "0.1"], kills=[at_random((0.5, 1.0))])
    assert result.kills == 1
    assert result.exit_codes == [-9, 0]
    assert result.runs[0].killed_pids
    assert len(list(state.glob("step-*"))) == 40
    assert _helpers_alive(state) == []


def test_failed_job_is_reported_with_its_log(toy_harness: CrashHarness) -> None:
    with pytest.raises(JobFailedError, match="exited with 3"):
        toy_harness.run(JOBS / "fail_job.py", ["3"])


def test_timeout_kills_the_run(tmp_path: Path) -> None:
    with CrashHarness(tmp_path / "h", timeout=2.0) as harness:
        with pytest.raises(RunTimeoutError, match="timed out"):
            harness.run(JOBS / "fail_job.py", ["hang"])
        assert harness._active == []


def test_executor_kill_needs_a_cluster(toy_harness: CrashHarness, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="standalone cluster"):
        toy_harness.run(TOY, [tmp_path / "s", 1], kills=[at_random((0, 1), target="executor")])


def test_counting_reports_lost_duplicated_unexpected() -> None:
    count = count_sequence(pa.array([0, 1, 1, 3, 7]), range(5))
    assert count.lost == [2, 4]
    assert count.duplicated == {1: 2}
    assert count.unexpected == [7]
    assert not count.exactly_once
    assert not count.at_least_once
    with pytest.raises(AssertionError, match=r"lost 2 \[2, 4\]; duplicated 1 \[1x2\]"):
        assert_exactly_once([0, 1, 1, 3, 7], range(5), what="toy")


def test_counting_accepts_exact_and_duplicates_for_at_least_once() -> None:
    assert assert_exactly_once(pa.chunked_array([[2, 0], [1]]), range(3)).seen == 3
    assert assert_at_least_once([0, 1, 1, 2], range(3)).duplicated == {1: 2}
    with pytest.raises(AssertionError, match="lost records"):
        assert_at_least_once([0, 2], range(3))


@pytest.mark.crash
@pytest.mark.soak
def test_soak_command_counts_a_killed_and_restarted_pipeline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The write-ahead-log path on the S3 server (the local paths run the same soak code;
    the terminated soak below runs one of them). Seed 6 arms the cycle's kill at
    ``wal.after_send`` of its second batch: a named point always fires (a random moment
    may come after the job finished), inside the window where the restart re-sends."""
    from firesteel.testing.scripts.wal_target import read_writes, resends
    from firesteel.testing.soak import SETTINGS_ENV, main

    workdir = tmp_path / "soak"
    code = main(["wal-s3", "--cycles", "1", "--seed", "6", "--workdir", str(workdir)])
    report = json.loads(capsys.readouterr().out)
    assert (report["path"], report["cycles"], report["records"]) == ("wal-s3", 1, 200)
    assert report["kills"] == 1, report
    assert report["lost"] == report["duplicated"] == report["resent_beyond_contract"] == 0
    assert code == 0
    # The re-send the upserts absorbed shows in the target's log of writes.
    assert len(resends(read_writes(str(workdir / "target.sqlite"))).segments) == 1
    assert SETTINGS_ENV not in os.environ, "the soak left its S3 settings behind"


@pytest.mark.soak
def test_a_terminated_soak_stops_the_job_it_started_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import contextlib
    import signal
    import subprocess
    import sys
    import time

    workdir = tmp_path / "soak"
    command = [sys.executable, "-m", "firesteel.testing.soak", "files", "--cycles", "50"]
    soak = subprocess.Popen([*command, "--workdir", str(workdir)], stderr=subprocess.DEVNULL)
    started: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while not any(p.name().startswith("java") for p in started):
            assert time.monotonic() < deadline, "the soak's job never started a JVM"
            time.sleep(0.5)
            started = psutil.Process(soak.pid).children(recursive=True)
        soak.send_signal(signal.SIGTERM)
        code = soak.wait(timeout=60)
        alive = wait_gone(started, timeout=30)
    finally:
        soak.kill()
        for proc in started:
            with contextlib.suppress(psutil.Error):
                proc.kill()
    assert code == 128 + signal.SIGTERM
    assert alive == [], f"left running: {alive}"
    progress = json.loads((workdir / "soak.json").read_text())
    assert (progress["done"], progress["feeding"], progress["finished"]) == (1, False, False)

    from firesteel.testing.soak import main

    # The terminated cycle's job is one more crash for the resumed run to recover.
    code = main(["files", "--resume", "--cycles", "1", "--workdir", str(workdir)])
    report = json.loads(capsys.readouterr().out)
    assert (report["cycles"], report["legs"], report["records"]) == (1, 2, 200)
    assert report["lost"] == report["duplicated"] == 0
    assert code == 0
    assert json.loads((workdir / "soak.json").read_text())["finished"] is True


@pytest.mark.parametrize(
    ("saved", "args", "error"),
    [
        (None, ["--resume"], "soak.json does not exist: --resume needs the --workdir"),
        ("{not json", ["--resume"], "soak.json is not a soak's progress"),
        ({"path": "wal", "cycles": 5}, ["--resume"], "a soak of path 'wal', not 'files'"),
        ({"path": "files", "cycles": 5, "finished": True}, ["--resume"], "has finished"),
        (
            {"path": "files", "cycles": 5, "done": 2, "feeding": True},
            ["--resume"],
            "died while writing the input of cycle 3",
        ),
        ({"path": "files", "cycles": 5}, ["--resume"], "holds no random state"),
        ({"path": "files", "cycles": 5}, [], "holds a soak already"),
    ],
)
def test_a_soak_that_cannot_resume_says_why_before_starting_anything(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    saved: object,
    args: list[str],
    error: str,
) -> None:
    from firesteel.testing.soak import main

    if saved is not None:
        text = saved if isinstance(saved, str) else json.dumps(saved)
        (tmp_path / "soak.json").write_text(text)
    with pytest.raises(SystemExit) as exited:
        main(["files", *args, "--workdir", str(tmp_path)])
    assert exited.value.code == 2
    assert error in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == (["soak.json"] if saved else [])


@pytest.mark.parametrize(
    ("run", "error"),
    [
        ({"checkpoint_starts": 3, "state_starts": 3}, "has no 'files' in its run section"),
        (
            {"checkpoint_starts": 3, "state_starts": 3, "files": "two"},
            "has 'two', not a whole number, as 'files' in its run section",
        ),
        (
            {"checkpoint_starts": None, "state_starts": 3, "files": 2},
            "has None, not a whole number, as 'checkpoint_starts' in its run section",
        ),
        (
            {"checkpoint_starts": 3, "state_starts": True, "files": 2},
            "has True, not a whole number, as 'state_starts' in its run section",
        ),
    ],
)
def test_a_saved_run_missing_a_key_or_holding_a_wrong_type_names_the_file_and_the_key(
    run: dict[str, object], error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from firesteel.testing.soak import main

    state = random.Random(1).getstate()
    saved = {"path": "files", "cycles": 5, "done": 2, "rng": list(state), "run": run}
    (tmp_path / "soak.json").write_text(json.dumps(saved))
    with pytest.raises(SystemExit) as exited:
        main(["files", "--resume", "--workdir", str(tmp_path)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'soak.json'} {error}" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        ("source", 7, "has 7, not a name, as 'source'"),
        ("source", "", "has '', not a name, as 'source'"),
    ],
)
def test_saved_run_names_are_checked(key: str, value: object, error: str, tmp_path: Path) -> None:
    from firesteel.testing.soak import SavedRun, SoakError

    saved = SavedRun({key: value}, tmp_path / "soak.json")
    with pytest.raises(SoakError, match=re.escape(f"{tmp_path / 'soak.json'} {error}")):
        saved.name(key)
    assert SavedRun({"source": "t-1"}, tmp_path).name("source") == "t-1"


def test_resume_needs_a_workdir(capsys: pytest.CaptureFixture[str]) -> None:
    from firesteel.testing.soak import main

    with pytest.raises(SystemExit):
        main(["files", "--resume"])
    assert "--resume needs the --workdir" in capsys.readouterr().err


def test_soak_kills_are_armed_in_the_two_batches_after_the_last_commit(tmp_path: Path) -> None:
    import random
    from types import SimpleNamespace

    from firesteel.testing.harness import AtPoints, AtRandom, next_batch
    from firesteel.testing.soak import arm

    checkpoint = tmp_path / "ck"
    assert next_batch(checkpoint) == 0
    (checkpoint / "commits").mkdir(parents=True)
    for name in ("0", "1", "4", ".4.crc"):
        (checkpoint / "commits" / name).write_text("v1")
    assert next_batch(checkpoint) == 5

    points = ("sink.after_write", "driver.mid_commit")
    run = SimpleNamespace(points=points, checkpoint=checkpoint)
    rng = random.Random(3)
    kills = [arm(run, rng) for _ in range(60)]  # type: ignore[arg-type]
    specs = [k.specs[0] for k in kills if isinstance(k, AtPoints)]
    assert set(specs) == {f"{p}@{b}" for p in points for b in (5, 6)}
    # A quarter of the kills is drawn inside the commit, besides the named points' share.
    inside = sum(spec.startswith("driver.") for spec in specs)
    assert inside > len(kills) / 3, (inside, specs)
    randoms = [k for k in kills if isinstance(k, AtRandom)]
    assert randoms and all(k.when is not None and not k.when() for k in randoms)
    (checkpoint / "offsets").mkdir()
    (checkpoint / "offsets" / "6").write_text("v1")
    assert any(k.when() for k in randoms if k.when is not None)


def test_jobs_map_the_jvm_class_archive(tmp_path: Path) -> None:
    archive = driver_archive()
    assert archive is not None and archive.stat().st_size > 0
    flags = tmp_path / "flags"
    # -Xshare:on turns a class archive the JVM cannot map (wrong class path, damaged
    # file) into a failed start instead of a silent start without it.
    with CrashHarness(tmp_path / "harness", env={"JDK_JAVA_OPTIONS": "-Xshare:on"}) as harness:
        result = harness.run(JOBS / "jvm_probe_job.py", [flags])
    assert result.exit_codes == [0], result.summary()
    assert f"-XX:SharedArchiveFile={archive}" in flags.read_text().split("\n")


def test_harness_without_the_jvm_class_archive(tmp_path: Path) -> None:
    flags = tmp_path / "flags"
    with CrashHarness(tmp_path / "harness", jvm_archive=False) as harness:
        result = harness.run(JOBS / "jvm_probe_job.py", [flags])
    assert result.exit_codes == [0], result.summary()
    assert not any(flag.startswith("-XX:SharedArchiveFile") for flag in flags.read_text().split())
    # A killed driver leaves Java's scratch folders where java.io.tmpdir says: in the
    # harness's workdir, not /tmp.
    assert f"-Djava.io.tmpdir={tmp_path / 'harness' / 'tmp'}" in flags.read_text().split("\n")


def test_task_kills_arm_every_point_in_every_batch_and_partition_of_one_run() -> None:
    kills = task_kills(["sink.after_write", "sink.after_pre_commit"], range(3, 5))
    assert kills.mode == "process"
    assert kills.specs == (
        "sink.after_write@3",
        "sink.after_pre_commit@3",
        "sink.after_write@4",
        "sink.after_pre_commit@4",
    )
    per_partition = task_kills(["sink.after_write"], [7], partitions=(0, 1))
    assert per_partition.specs == ("sink.after_write@7:0", "sink.after_write@7:1")
    # local[2,4] gives a task four attempts: a fourth kill would fail the query.
    with pytest.raises(HarnessError, match="at most three"):
        task_kills(["a", "b", "c", "d"], [1])


def test_the_worker_python_imports_pyspark_from_site_packages_not_its_zip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyspark

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    package = Path(pyspark.__file__).resolve().parent
    spark_copies = [
        str(package / "python" / "lib" / "pyspark.zip"),
        *map(str, sorted((package / "jars").glob("spark-core_*.jar"))),
    ]
    wrapper = worker_python(sys.executable)
    assert wrapper != sys.executable
    assert worker_python(sys.executable) == wrapper  # written once
    # The Makefile names the venv's bin/python, pytest's shebang its bin/python3.
    other_name = Path(sys.executable).with_name("python3")
    if other_name.exists() and other_name.samefile(sys.executable):
        assert worker_python(str(other_name)) != str(other_name)
    # As Spark starts its Python processes: its copies first, then the user's entries.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*spark_copies, str(tmp_path)])}
    shown = subprocess.run(
        [wrapper, "-c", "import sys, pyspark; print(pyspark.__file__); print(sys.path)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert Path(shown[0]).resolve() == package / "__init__.py"
    assert str(tmp_path) in shown[1]
    assert not any(copy in shown[1] for copy in spark_copies)
    # Another interpreter may need the zip to import PySpark at all: it is left alone.
    assert worker_python("/usr/bin/python3") == "/usr/bin/python3"
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", "/usr/bin/python3")
    use_worker_python()
    assert os.environ["PYSPARK_PYTHON"] == wrapper
    assert os.environ["PYSPARK_DRIVER_PYTHON"] == "/usr/bin/python3"


def test_suite_workers_fork_from_the_daemon_that_imported_their_modules(spark: Any) -> None:
    def seen_by_a_worker(_: object) -> tuple[str, bool]:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as parent:
            command = parent.read().replace(b"\0", b" ").decode()
        return command, {"pyarrow.fs", "firesteel.core"} <= set(sys.modules)

    [(daemon, imported)] = spark.sparkContext.parallelize([0], 1).map(seen_by_a_worker).collect()
    # A plain RDD task imports neither: they come from the daemon the worker was forked from.
    assert f"-m {DAEMON_CONFIG['spark.python.daemon.module']} pyspark.worker" in daemon
    assert imported


def test_kills_aimed_at_one_query_of_a_group_carry_its_name() -> None:
    assert at_point("sink.after_write", batch=2, query="files").specs == (
        "sink.after_write@2#files",
    )
    assert task_kills(["sink.after_write"], [3], partitions=[1], query="wal").specs == (
        "sink.after_write@3:1#wal",
    )


def test_a_kill_gathering_queries_names_them_all_and_kills_the_whole_job() -> None:
    assert at_point("driver.mid_commit", query=["files", "state"]).specs == (
        "driver.mid_commit#files+state",
    )
    with pytest.raises(HarnessError, match="two queries or more and mode='job'"):
        at_point("driver.mid_commit", query=["files", "state"], mode="process")
    with pytest.raises(HarnessError, match="two queries or more"):
        at_point("driver.mid_commit", query=["files"])


def test_parts_of_a_group_need_distinct_names(toy_harness: CrashHarness) -> None:
    parts = [Part("a", TOY), Part("a", TOY)]
    with pytest.raises(HarnessError, match="distinct names"):
        toy_harness.run_together(parts)


def test_the_launcher_refuses_a_part_without_a_script() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "firesteel.testing.launch", "--together", "files"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "each part needs a name and a script: files" in done.stderr


def test_kills_of_one_run_are_armed_together_in_one_mode() -> None:
    both = in_one_run(
        task_kills(["sink.after_write"], [1], query="a"), task_kills(["sink.after_write"], [2])
    )
    assert both == AtPoints(("sink.after_write@1#a", "sink.after_write@2"), mode="process")
    with pytest.raises(HarnessError, match="one mode"):
        in_one_run(at_point("sink.after_write"), task_kills(["sink.after_write"], [1]))
