"""The harness's tools for what a user changes between a crash and the restart."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

from firesteel.core.storage import canonical
from firesteel.testing import Spellings
from firesteel.testing.clock import clock_offset


def test_spellings_differ_from_one_restart_to_the_next_and_name_one_folder(
    tmp_path: Path,
) -> None:
    spellings = Spellings(tmp_path / "ck")
    runs = [spellings(run) for run in range(len(spellings.variants) + 1)]
    assert len(set(spellings.variants)) == len(spellings.variants) >= 4
    assert all(a != b for a, b in itertools.pairwise(runs))
    assert {canonical(s) for s in runs} == {str((tmp_path / "ck").resolve())}
    assert any(s.startswith("file://") for s in runs)
    assert any(Path(s.removeprefix("file://")).is_symlink() for s in runs)
    assert [spellings.next() for _ in runs] == runs


def _child_time(env: dict[str, str]) -> float:
    code = "import time; print(time.time(), time.time_ns())"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    seconds, nanos = float(out[0]), int(out[1])
    assert abs(seconds - nanos / 1e9) < 1
    return seconds


def _jvm_time(env: dict[str, str], folder: Path) -> float:
    """``System.currentTimeMillis()`` of a child JVM, in seconds."""
    source = folder / "Now.java"
    source.write_text(
        "public class Now { public static void main(String[] a) {"
        " System.out.println(System.currentTimeMillis()); } }"
    )
    out = subprocess.run(
        ["java", str(source)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return int(out) / 1000


def test_clock_offset_sets_the_wall_clock_of_a_child_python_and_jvm_back(tmp_path: Path) -> None:
    behind = clock_offset(-3600)
    assert -3610 < _child_time(behind) - time.time() < -3590
    assert abs(_child_time({}) - time.time()) < 10
    started = time.time()
    jvm = _jvm_time(behind, tmp_path)
    assert started - 3600 - 5 < jvm < time.time() - 3600 + 5, "Spark's JVM kept the real clock"
    assert abs(_child_time(clock_offset(+86_400)) - time.time() - 86_400) < 10
