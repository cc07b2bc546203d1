"""The ``firesteel`` command as a new user meets it: version, help, errors, hidden internals,
the doctor."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from firesteel.cli.main import main

COMMAND = [sys.executable, "-m", "firesteel.cli.main"]


def _run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [*COMMAND, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **env},
    )


def test_version_and_help_go_to_standard_output() -> None:
    version = _run("--version")
    assert (version.returncode, version.stdout) == (
        0,
        f"firesteel {metadata.version('firesteel')}\n",
    )
    shown = _run("--help")
    assert shown.returncode == 0 and shown.stderr == ""
    for command in ("demo", "state", "savepoint", "doctor"):
        assert f"\n  {command} " in shown.stdout
    # Commands of installed distributions say what they do, not only where they come from.
    assert "verify a pipeline's blueprint" in shown.stdout


def test_an_unknown_command_exits_2_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stat"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'stat'" in err and "usage: firesteel" in err


@pytest.mark.parametrize("command", [["state"], ["savepoint"], ["doctor"]])
def test_every_command_help_ends_with_an_example(command: list[str]) -> None:
    shown = _run(*command, "--help")
    assert shown.returncode == 0, shown.stderr
    assert "example:\n  firesteel " in shown.stdout or "example:\n  PYSPARK_PYTHON=" in shown.stdout


def test_state_of_a_location_without_state_is_an_error_naming_it(tmp_path: Path) -> None:
    for location in (tmp_path / "missing", tmp_path):
        shown = _run("state", str(location))
        assert shown.returncode == 2
        assert f"no firesteel state under {location}" in shown.stderr


def test_state_hides_firesteels_own_entries_unless_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from firesteel.backends import FilesystemBackend
    from firesteel.core.context import TaskScope
    from firesteel.state import ValueStateDescriptor
    from firesteel.state.backend import KeyedTask, OperatorSpec, StateDeclarations
    from firesteel.state.clock import CLOCK, advance
    from firesteel.state.keygroups import KeyGroupRange

    backend = FilesystemBackend(f"file://{tmp_path}/state")
    count = ValueStateDescriptor("count", int)
    spec = OperatorSpec("op", ("sensor",), 128, 1)
    task = KeyedTask(TaskScope("query", 0, 0, 0), KeyGroupRange.for_partition(0, 1, 128))
    store = backend.open_store(spec, task, StateDeclarations([count, CLOCK]), 1_000)
    advance(store, task.key_groups, 1_000)
    store.set_current_key(("sensor-1",), 7)
    store.state(count).update(3)
    store.snapshot().wait()

    assert main(["state", backend.location]) == 0
    shown = capsys.readouterr().out
    from firesteel.cli.status import state_status

    stored = [p for p in (tmp_path / "state" / "op").rglob("*") if p.is_file()]
    (counted,) = state_status(backend.location, keys=True)["operators"].values()
    assert counted == {
        "files": len(stored),
        "bytes": sum(p.stat().st_size for p in stored),
        "keys": 1,
        "entries": 1,
    }
    assert "count" in shown and CLOCK.name not in shown and "(1 entries)" in shown
    assert main(["state", backend.location, "--all"]) == 0
    shown = capsys.readouterr().out
    assert CLOCK.name in shown and "(2 entries)" in shown


def test_doctor_names_a_worker_interpreter_without_firesteel(tmp_path: Path) -> None:
    fine = _run("doctor", PYSPARK_PYTHON=sys.executable)
    assert "ok  worker interpreter: PYSPARK_PYTHON" in fine.stdout, fine.stdout
    assert "ok  java: " in fine.stdout
    bare = tmp_path / "bare-python"
    bare.write_text('#!/bin/sh\nexec /usr/bin/env -i /usr/bin/python3 -I "$@"\n')
    bare.chmod(0o755)
    broken = _run("doctor", PYSPARK_PYTHON=str(bare))
    assert broken.returncode == 1
    assert f"FIX worker interpreter: PYSPARK_PYTHON: {bare} has no firesteel" in broken.stdout
    assert f"set PYSPARK_PYTHON={sys.executable}" in broken.stdout
