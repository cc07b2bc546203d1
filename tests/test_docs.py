"""The documentation cannot drift from the code: every dotted ``firesteel.`` name it shows
imports, and the site builds strictly (a broken link or anchor fails)."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "connectors").glob("*/README.md"),
        ROOT / "backends" / "rocksdb" / "README.md",
        ROOT / "pipelines" / "README.md",
        ROOT / "testing" / "README.md",
        ROOT / "benchmarks" / "README.md",
    ]
)
NOT_PYTHON = {
    # entry point groups
    "firesteel.connectors",
    "firesteel.commands",
    "firesteel.fault_points",
    "firesteel.fault_handler",
    # pipeline configuration keys (HOCON)
    "firesteel.guarantee",
    "firesteel.kafka.bootstrap.servers",
    "firesteel.runner.jvm",
    "firesteel.streamlets",
    "firesteel.supervision",
    "firesteel.supervision.restarts",
    # headers of the Kafka source's dead letters
    "firesteel.location",
    "firesteel.offset",
    "firesteel.reason",
}
"""Dotted names the docs show that are not Python names, each for the reason above it."""
DOTTED = re.compile(r"`(firesteel(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def _names() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for page in PAGES:
        if page.is_symlink() or not page.is_file():
            continue
        for name in DOTTED.findall(page.read_text(encoding="utf-8")):
            if name not in NOT_PYTHON:
                found.setdefault(name, []).append(str(page.relative_to(ROOT)))
    return found


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 1, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def test_every_dotted_firesteel_name_in_the_docs_imports() -> None:
    names = _names()
    assert len(names) > 50, "the scan found too few names: is the pattern still right?"
    broken = {name: pages for name, pages in names.items() if not _resolves(name)}
    assert not broken, broken


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert built.returncode == 0, built.stderr[-4000:]
    assert (tmp_path / "connectors" / "kafka" / "index.html").is_file()
