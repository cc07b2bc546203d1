"""The test tooling's fault handler fires exactly where and as often as FIRESTEEL_FAULT says,
and kills hard; only declared points can be armed; without the test tooling nothing kills."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from firesteel.core.faults import AFTER_WRITE, REGISTRY, FaultPointError, fault_point
from firesteel.testing import at_point, task_kills
from firesteel.testing.faults import (
    FAULT_ENV,
    KILL_ENV,
    MARKER_DIR_ENV,
    PGID_ENV,
    SESSION,
    gathered,
)
from firesteel.testing.points import UnknownFaultPointError, registered
from firesteel.testing.processes import gone
from firesteel.testing.soak import PATHS

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ["core", "sources", "sinks", "state", "backends", "connectors", "pipelines"]
"""Folders holding library code (the connectors' tests and tooling are not library code)."""

SCRIPT = """
import sys
from firesteel.core.faults import AFTER_WRITE
for batch in range(5):
    for partition in range(2):
        AFTER_WRITE.fire(batch, partition)
        print(batch, partition, flush=True)
"""


def run(spec: str, marker_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, FAULT_ENV: spec, KILL_ENV: "process", MARKER_DIR_ENV: str(marker_dir)}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize(
    ("spec", "printed"),
    [
        ("sink.after_write@2:1", ["0 0", "0 1", "1 0", "1 1", "2 0"]),
        ("sink.after_write@3", ["0 0", "0 1", "1 0", "1 1", "2 0", "2 1"]),
        ("sink.after_write", []),
    ],
)
def test_kills_with_sigkill_at_the_named_point(
    spec: str, printed: list[str], tmp_path: Path
) -> None:
    result = run(spec, tmp_path)
    assert result.returncode == -signal.SIGKILL
    assert result.stdout.splitlines() == printed


def test_fires_once_per_marker_dir(tmp_path: Path) -> None:
    assert run("sink.after_write@1", tmp_path).returncode == -signal.SIGKILL
    again = run("sink.after_write@1", tmp_path)
    assert again.returncode == 0
    assert len(again.stdout.splitlines()) == 10


def test_other_points_do_not_fire(tmp_path: Path) -> None:
    result = run("driver.after_commit@1,sink.after_write@9", tmp_path)
    assert result.returncode == 0
    assert len(result.stdout.splitlines()) == 10


def test_noop_without_environment(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    env.update({KILL_ENV: "process", MARKER_DIR_ENV: str(tmp_path)})
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    assert len(result.stdout.splitlines()) == 10
    assert not any(tmp_path.iterdir()), "no fault fired, so no marker may be written"


def without_test_tooling(tmp_path: Path) -> Path:
    """A site folder holding every installed distribution but ``firesteel-testing``."""
    site = tmp_path / "site"
    site.mkdir()
    for entry in Path(pytest.__file__).parents[1].iterdir():
        if "firesteel_testing" not in entry.name:
            (site / entry.name).symlink_to(entry)
    return site


def test_without_the_test_tooling_an_armed_point_does_nothing(tmp_path: Path) -> None:
    """Product code alone never kills, whatever the environment says: a production job
    cannot be made to kill itself by setting FIRESTEEL_FAULT."""
    site = without_test_tooling(tmp_path)
    script = f"import site; site.addsitedir({str(site)!r})\n{SCRIPT}"
    armed = {FAULT_ENV: "sink.after_write@1", KILL_ENV: "process", MARKER_DIR_ENV: str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-S", "-c", script],
        env={**os.environ, **armed},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 10
    assert [p.name for p in tmp_path.iterdir()] == ["site"], "no fault fired, no marker"


def test_no_library_module_reads_the_fault_environment() -> None:
    """Only the test tooling's handler knows how points are armed."""
    readers = [
        path.relative_to(ROOT)
        for folder in LIBRARY
        for path in (ROOT / folder).rglob("*.py")
        if "tests" not in path.relative_to(ROOT).parts and FAULT_ENV in path.read_text()
    ]
    assert readers == []


def test_arming_an_undeclared_point_names_it_and_its_close_matches() -> None:
    with pytest.raises(UnknownFaultPointError, match=r"'sink\.after_wrte'") as error:
        at_point("sink.after_wrte", batch=1)
    assert error.value.close_matches[0] == "sink.after_write"
    assert "close matches: sink.after_write" in str(error.value)
    with pytest.raises(UnknownFaultPointError, match=r"kafka\.after_flsh"):
        task_kills(["sink.after_write", "kafka.after_flsh"], [1])


def test_declared_points_arm_by_name_or_by_object() -> None:
    assert at_point("sink.after_write", batch=2, partition=1).specs == ("sink.after_write@2:1",)
    assert at_point(AFTER_WRITE, batch=2).specs == ("sink.after_write@2",)


def test_a_point_declared_twice_must_mean_the_same() -> None:
    again = fault_point(AFTER_WRITE.name, AFTER_WRITE.meaning)
    assert again is AFTER_WRITE
    with pytest.raises(FaultPointError, match="already declared"):
        fault_point(AFTER_WRITE.name, "something else")
    assert REGISTRY[AFTER_WRITE.name] is AFTER_WRITE


def test_every_point_the_library_declares_is_found_through_the_entry_points() -> None:
    """A module declaring points but missing from ``firesteel.fault_points`` could not be armed."""
    declared = set()
    for folder in LIBRARY:
        for path in (ROOT / folder).rglob("*.py"):
            if "tests" in path.relative_to(ROOT).parts:
                continue
            declared.update(re.findall(r'fault_point\(\s*"([^"]+)"', path.read_text()))
    assert len(declared) >= 16, declared
    assert declared <= set(registered()), declared - set(registered())


def test_every_soak_point_is_declared() -> None:
    points = {point for path in PATHS.values() for point in path.points}
    assert points
    assert points <= set(registered()), points - set(registered())


def test_a_spec_for_one_query_never_fires_outside_its_tasks_and_commits(tmp_path: Path) -> None:
    result = run("sink.after_write@1#files", tmp_path)
    assert result.returncode == 0
    assert len(result.stdout.splitlines()) == 10


@pytest.mark.parametrize(("query", "fires"), [("files", True), ("state", False)])
def test_a_spec_for_one_query_fires_only_in_that_querys_tasks(
    spark: SparkSession, tmp_path: Path, query: str, fires: bool
) -> None:
    """Spark describes a streaming query's jobs with its name on the first line; a task of a
    job so described reaches an armed point (in its Python worker, killed if it fires)."""
    markers = str(tmp_path)

    def reach(_: int) -> str:
        # Spark reuses its Python workers: one left armed would kill a later test's task.
        armed = {FAULT_ENV: "sink.after_write@1#files", KILL_ENV: "process"}
        os.environ.update({**armed, MARKER_DIR_ENV: markers})
        try:
            AFTER_WRITE.fire(1, 0)
        finally:
            for name in (*armed, MARKER_DIR_ENV):
                os.environ.pop(name, None)
        return "alive"

    context = spark.sparkContext
    context.setJobDescription(f"{query}\nid = 0\nrunId = 0\nbatch = 1")
    try:
        if fires:
            with pytest.raises(Py4JJavaError, match="Python worker exited unexpectedly"):
                context.parallelize([0], 1).map(reach).collect()
        else:
            assert context.parallelize([0], 1).map(reach).collect() == ["alive"]
    finally:
        context.setJobDescription(None)
    assert [p.name for p in tmp_path.iterdir()] == (["sink.after_write@1#files"] if fires else [])


COMMIT_SCRIPT = """
import json, sys
from pathlib import Path
from firesteel.core.faults import committing
from firesteel.core.faults import MID_COMMIT, name_query
name, checkpoint = sys.argv[1], Path(sys.argv[2])
checkpoint.mkdir(parents=True, exist_ok=True)
(checkpoint / "metadata").write_text(json.dumps({"id": f"id-{name}"}))
name_query(f"id-{name}", name)
print("committing", flush=True)
with committing(str(checkpoint)):
    MID_COMMIT.fire(3)
print("committed", flush=True)
"""


def commit_of(name: str, spec: str, tmp_path: Path, markers: Path) -> subprocess.Popen[str]:
    """A process that names its query ``name`` and reaches ``driver.mid_commit`` of batch 3
    inside that query's driver-side commit, armed with ``spec``."""
    env = {**os.environ, FAULT_ENV: spec, KILL_ENV: "process", MARKER_DIR_ENV: str(markers)}
    return subprocess.Popen(
        [sys.executable, "-c", COMMIT_SCRIPT, name, str(tmp_path / name)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(("query", "fires"), [("files", True), ("state", False)])
def test_a_spec_for_one_query_fires_in_that_querys_driver_commit(
    tmp_path: Path, query: str, fires: bool
) -> None:
    """The driver's commit knows its checkpoint, hence Spark's query id, which the driver
    reported under the query's name (the product's hook, reaching the test tooling's namer
    through its entry point, as a pipeline's host does)."""
    markers = tmp_path / "markers"
    done = commit_of(query, "driver.mid_commit@3#files", tmp_path, markers)
    out, _ = done.communicate(timeout=60)
    assert done.returncode == (-signal.SIGKILL if fires else 0)
    assert out.split() == (["committing"] if fires else ["committing", "committed"])


def test_a_spec_for_several_queries_kills_once_all_are_inside_the_point(tmp_path: Path) -> None:
    """The first query to reach the point waits there for the other; then both die, and
    the marker folder says which queries the kill found inside the point."""
    markers = tmp_path / "markers"
    spec = "driver.mid_commit#files+state"
    first = commit_of("files", spec, tmp_path, markers)
    assert first.stdout is not None
    assert first.stdout.readline().strip() == "committing"
    with pytest.raises(subprocess.TimeoutExpired):
        first.wait(timeout=1.5)
    second = commit_of("state", spec, tmp_path, markers)
    assert second.wait(timeout=60) == -signal.SIGKILL
    assert first.wait(timeout=60) == -signal.SIGKILL
    assert gathered(markers, spec) == ["files", "state"]
    assert (markers / spec).exists()


def test_one_process_per_query_waits_at_a_gathering_point(tmp_path: Path) -> None:
    """A second process of a query already waiting at the point goes on without waiting
    or firing: a query's tasks waiting there would each hold a task slot, and with every
    slot held the other queries never arrive."""
    markers = tmp_path / "markers"
    spec = "driver.mid_commit#files+state"
    first = commit_of("files", spec, tmp_path, markers)
    assert first.stdout is not None
    assert first.stdout.readline().strip() == "committing"
    again = commit_of("files", spec, tmp_path, markers)
    out, _ = again.communicate(timeout=60)
    assert again.returncode == 0
    assert out.split() == ["committing", "committed"]
    assert first.poll() is None
    last = commit_of("state", spec, tmp_path, markers)
    assert last.wait(timeout=60) == -signal.SIGKILL
    assert first.wait(timeout=60) == -signal.SIGKILL
    assert gathered(markers, spec) == ["files", "state"]


MODE_SCRIPT = """
import subprocess, sys
from firesteel.core.sink import AFTER_WRITE
child = subprocess.Popen(["sleep", "60"], stdout=subprocess.DEVNULL)
print(child.pid, flush=True)
AFTER_WRITE.fire(0, 0)
"""


@pytest.mark.parametrize(
    ("setting", "spec", "group_killed"),
    [
        ("process", "sink.after_write!job", True),
        ("job", "sink.after_write!process", False),
    ],
)
def test_a_spec_may_carry_its_own_kill_mode(
    tmp_path: Path, setting: str, spec: str, group_killed: bool
) -> None:
    """``!job`` kills the caller's process group (its child too) and ``!process`` the caller
    alone, whatever ``FIRESTEEL_FAULT_KILL`` says: one environment arms both kinds."""
    env = {**os.environ, FAULT_ENV: spec, KILL_ENV: setting, MARKER_DIR_ENV: str(tmp_path)}
    job = subprocess.Popen(
        [sys.executable, "-c", MODE_SCRIPT],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    out, _ = job.communicate(timeout=60)
    child = int(out.split()[0])
    try:
        assert job.returncode == -signal.SIGKILL
        assert gone(child) == group_killed
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)


SESSION_SCRIPT = """
import subprocess, sys
# Like PySpark's daemon, the process reaching the point leads a process group of its own.
reach = "import os; os.setpgid(0, 0); from firesteel.core import sink; sink.AFTER_WRITE.fire()"
subprocess.run([sys.executable, "-c", reach], check=False)
print("survived", flush=True)
"""


@pytest.mark.parametrize(("pgid", "survives"), [(SESSION, False), (None, True)])
def test_a_job_kill_may_take_the_group_leading_the_session(
    tmp_path: Path, pgid: str | None, survives: bool
) -> None:
    """``FIRESTEEL_FAULT_PGID=session`` kills the session's leading group (a pipeline's
    driver, its JVM) from a worker in a group of its own, which alone would spare them."""
    env = {**os.environ, FAULT_ENV: "sink.after_write", KILL_ENV: "job"}
    env.pop(PGID_ENV, None)
    if pgid is not None:
        env[PGID_ENV] = pgid
    job = subprocess.run(
        [sys.executable, "-c", SESSION_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        start_new_session=True,
        timeout=60,
        check=False,
    )
    assert (job.returncode, job.stdout.split()) == ((0, ["survived"]) if survives else (-9, []))
