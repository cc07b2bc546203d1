"""The runner's streamlets die with it, and one runner holds a work folder at a time."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from test_supervision import ALONE

from firesteel.core.reaper import reap, start_time
from firesteel.pipelines.runner import LocalRunner
from firesteel.pipelines.worklock import WorkFolderInUseError
from firesteel.testing.processes import wait_gone

TICKS = """
from firesteel.pipelines import AvroCodec, Outlet, Streamlet, StreamletLogic, StreamletShape

TICK = {"type": "record", "name": "Tick", "fields": [{"name": "value", "type": "long"}]}


class Ticks(Streamlet):
    shape = StreamletShape(outlets=[Outlet("out", AvroCodec(TICK))])

    def create_logic(self, context):
        return TicksLogic(context)


class TicksLogic(StreamletLogic):
    def run(self):
        rate = self.context.spark.readStream.format("rate").option("rowsPerSecond", 5).load()
        return [self.context.write_stream(rate.select("value"), "out")]
"""
TICKING = """
blueprint {
  streamlets { ticks = ticks.Ticks }
  topics { ticks { producers = [ticks.out] } }
}
firesteel.runtimes.spark.checkpointing.interval = 1s
"""


def _command(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # gone, or a zombie, since it was listed
        return ""


def _pipeline_processes(
    runner: psutil.Process, deadline: float, seen: list[psutil.Process]
) -> None:
    """Collect into ``seen`` the runner's descendants until its streamlet's JVM and Spark's
    Python workers (started by the first batch's sink) are among them."""
    commands = ""
    while time.monotonic() < deadline:
        seen.extend(p for p in runner.children(recursive=True) if p not in seen)
        commands = " ".join(_command(p) for p in seen)
        if "java" in commands and "pyspark.daemon" in commands:
            return
        time.sleep(1)
    pytest.fail(f"the streamlet's JVM and Python workers never showed up: {commands}")


def test_sigkilling_the_runners_group_leaves_no_process_of_the_pipeline(tmp_path: Path) -> None:
    (tmp_path / "ticks.py").write_text(TICKS)
    blueprint = tmp_path / "ticking.conf"
    blueprint.write_text(TICKING)
    command = [sys.executable, "-m", "firesteel.cli.main", "run-local", str(blueprint)]
    command += ["--work", str(tmp_path / "work")]
    with open(tmp_path / "runner.log", "wb") as log:
        runner = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    pipeline: list[psutil.Process] = []
    try:
        _pipeline_processes(psutil.Process(runner.pid), time.monotonic() + 240, pipeline)
        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait()
        alive = wait_gone(pipeline, timeout=5)
        assert not alive, [_command(p)[:200] for p in alive]
    finally:
        for process in pipeline:
            with contextlib.suppress(psutil.Error):
                process.kill()
        if runner.poll() is None:
            runner.kill()
            runner.wait()


def test_a_second_runner_on_the_same_work_folder_is_refused_naming_the_first(
    tmp_path: Path,
) -> None:
    blueprint = tmp_path / "alone.conf"
    blueprint.write_text(ALONE)
    (tmp_path / "pipeline_streamlets.py").write_text(
        (Path(__file__).parent / "pipeline_streamlets.py").read_text()
    )
    # Its Java cannot start: the streamlet dies at once, the runner holds the folder all the same.
    no_java = {"readings": {"JAVA_HOME": str(tmp_path / "no-java")}}
    settings = ["firesteel.supervision.restarts = 0"]
    first = LocalRunner(blueprint, tmp_path / "work", settings=settings, environment=no_java)
    second = LocalRunner(blueprint, tmp_path / "work", settings=settings, environment=no_java)
    first.start()
    try:
        with pytest.raises(WorkFolderInUseError) as refused:
            second.start()
        assert f"pid {os.getpid()} on host {socket.gethostname()}" in str(refused.value)
        assert str(tmp_path / "work") in str(refused.value)
        assert second.processes == {}
    finally:
        first.stop()
    second.start()
    second.stop()


def test_the_reaper_kills_the_groups_it_still_lists_when_its_input_ends() -> None:
    sleepers = [subprocess.Popen(["sleep", "60"], start_new_session=True) for _ in range(2)]
    try:
        first, second = (f"+{s.pid} {start_time(s.pid)}\n" for s in sleepers)
        killed = reap([first, second, f"-{sleepers[1].pid}\n"])
        assert killed == [sleepers[0].pid]
        assert sleepers[0].wait(timeout=5) == -signal.SIGKILL
        assert sleepers[1].poll() is None
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()
