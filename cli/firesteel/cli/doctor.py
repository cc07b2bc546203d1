"""``firesteel doctor``: check what a first run on a machine trips over, and say what to fix.

Each check prints one line, ``ok`` or ``FIX`` with the remedy; the exit code is 1
when any check needs a fix. The checks: Java (Spark 4 needs 17 or later), the
interpreter Spark starts its Python workers with (``PYSPARK_PYTHON``) and whether
it has firesteel, how long that interpreter takes to import what a firesteel task
imports (Spark gives a new worker about ten seconds to connect back, and a
worker slower than that on a loaded machine fails the task with "Python worker
failed to connect back"), and the installed connectors, backends and commands.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata

from firesteel.cli.args import command_parser

JAVA_MINIMUM = 17
"""The oldest Java that Spark 4 runs on."""
WORKER_IMPORTS = "import pyarrow, pyspark.worker, firesteel.core"
"""What a Python worker of a firesteel task imports before it can connect back."""
SLOW_WORKER_SECONDS = 5.0
"""A worker start slower than this leaves little margin under Spark's connect-back wait."""
ENTRY_POINT_GROUPS = ("firesteel.connectors", "firesteel.backends", "firesteel.commands")


@dataclass(frozen=True)
class Finding:
    """One check's outcome: what was checked, what was found, and the fix if one is needed."""

    check: str
    found: str
    fix: str = ""

    def line(self) -> str:
        status = "FIX" if self.fix else "ok "
        text = f"{status} {self.check}: {self.found}"
        return f"{text}\n    -> {self.fix}" if self.fix else text


def distribution_version(name: str) -> str:
    """The installed version of distribution ``name``, or ``not installed``."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def check_java() -> Finding:
    java = shutil.which("java")
    if java is None:
        return Finding("java", "none on PATH", f"install Java {JAVA_MINIMUM}+ (a JRE will do)")
    shown = subprocess.run(
        [java, "-version"], capture_output=True, text=True, timeout=60, check=False
    ).stderr
    found = re.search(r'version "(\d+)(?:\.(\d+))?', shown)
    if found is None:
        return Finding("java", f"{java} printed no version", f"install Java {JAVA_MINIMUM}+")
    major = int(found[1]) if found[1] != "1" else int(found[2] or 0)
    if major < JAVA_MINIMUM:
        return Finding("java", f"{major} at {java}", f"Spark 4 needs Java {JAVA_MINIMUM}+")
    return Finding("java", f"{major} at {java}")


def worker_python() -> str:
    """The interpreter Spark starts Python workers with: ``PYSPARK_PYTHON``, else ``python3``."""
    return os.environ.get("PYSPARK_PYTHON") or shutil.which("python3") or "python3"


def check_worker_python() -> Finding:
    python = worker_python()
    named = (
        "PYSPARK_PYTHON" if os.environ.get("PYSPARK_PYTHON") else "python3 (PYSPARK_PYTHON unset)"
    )
    fix = f"set PYSPARK_PYTHON={sys.executable} (this interpreter has firesteel)"
    try:
        probe = subprocess.run(
            [python, "-c", "import firesteel.core"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except OSError as exc:
        return Finding("worker interpreter", f"{named}: {python} does not run ({exc})", fix)
    if probe.returncode != 0:
        return Finding("worker interpreter", f"{named}: {python} has no firesteel", fix)
    return Finding("worker interpreter", f"{named}: {python}")


def check_worker_start() -> Finding:
    python = worker_python()
    started = time.perf_counter()
    try:
        probe = subprocess.run(
            [python, "-c", WORKER_IMPORTS], capture_output=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Finding("worker start", f"{python} could not import a task's modules ({exc})")
    seconds = time.perf_counter() - started
    found = f"{seconds:.1f} s to start {python} and import pyarrow, PySpark's worker, firesteel"
    if probe.returncode != 0:
        return Finding("worker start", found, "see the worker interpreter check above")
    if seconds > SLOW_WORKER_SECONDS:
        return Finding(
            "worker start",
            found,
            "on a loaded machine this may exceed Spark's connect-back wait: compile the "
            "installed packages (python -m compileall on site-packages, or uv pip install "
            "--compile-bytecode), unset PYTHONDONTWRITEBYTECODE, or give the job fewer cores",
        )
    return Finding("worker start", found)


def installed_plugins() -> list[Finding]:
    """One finding per entry point firesteel's groups list, with its distribution's version."""
    findings = []
    for group in ENTRY_POINT_GROUPS:
        for ep in sorted(metadata.entry_points(group=group), key=lambda e: e.name):
            dist = ep.dist.name if ep.dist else "?"
            findings.append(Finding(group, f"{ep.name} ({dist} {distribution_version(dist)})"))
    return findings


def main(argv: list[str]) -> int:
    """Run every check; 1 when any needs a fix."""
    command_parser(
        "firesteel doctor",
        (__doc__ or "").split("\n\n")[1],
        "PYSPARK_PYTHON=.venv/bin/python firesteel doctor",
    ).parse_args(argv)
    findings = [
        Finding("firesteel", distribution_version("firesteel")),
        check_java(),
        check_worker_python(),
        check_worker_start(),
        *installed_plugins(),
    ]
    sys.stdout.write("".join(f"{finding.line()}\n" for finding in findings))
    return 1 if any(finding.fix for finding in findings) else 0
