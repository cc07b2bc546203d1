"""The documentation cannot drift from the code: every dotted ``firesteel.`` name it shows
imports, and the site builds strictly (a broken link or anchor fails)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    "firesteel.query_namer",
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


# Every fenced code block of the pages above runs, or says why not.
#
# A Python block runs unless the line before its fence is a marker
# ``<!-- not run: <why> -->`` (docs/testing.md, "Code blocks in the docs"). A page's
# blocks run in order in one namespace, as a reader would paste them: pages that never
# name ``spark`` in one Spark-free process; the others in this test process, with its
# shared session as ``spark`` (or what ``getOrCreate`` gives), the example paths
# (``/data/...``, ``/chk/...``) moved into a temporary folder whose ``data/in`` holds
# one JSON record. A marked block is still
# compiled and its imports run, so a renamed module or function fails it too. A bash
# block is checked, not run: each command it names exists (a make target, a firesteel
# command, a module for ``python -m``, a program on PATH or a file).

FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>\w*)[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.M | re.S
)
NOT_RUN = re.compile(r"<!--\s*not run:(?P<why>[^>]*)-->\s*\Z")
SPARK = re.compile(r"\bspark\b|SparkSession")
EXAMPLE_PATHS = ("/data/", "/chk/")
"""Absolute paths of the examples, moved under a temporary folder when a page runs."""
SHELL = {"bash", "sh", "shell", "console"}
BUILTINS = {"cd", "export", "source", ".", "kill", "echo", "set", "unset", "command"}


@dataclass(frozen=True)
class Block:
    page: str
    lang: str
    body: str
    not_run: str | None
    """The marker's reason, or None when the block runs."""


def _blocks() -> list[Block]:
    found = []
    for page in PAGES:
        if page.is_symlink() or not page.is_file():
            continue
        text = page.read_text(encoding="utf-8")
        for fence in FENCE.finditer(text):
            marker = NOT_RUN.search(text[: fence.start()])
            body = textwrap.dedent(fence["body"])
            why = marker["why"].strip() if marker else None
            name = str(page.relative_to(ROOT))
            found.append(Block(name, fence["lang"].lower(), body, why))
    return found


def _imports(body: str) -> str:
    tree = ast.parse(body)
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    return "\n".join(ast.unparse(n) for n in nodes)


_RUNNER = """
import json, sys, traceback
failures = {}
for page, source in json.load(sys.stdin):
    try:
        exec(compile(source, page, "exec"), {"__name__": "__docs__"})
    except BaseException:
        failures[page] = traceback.format_exc(limit=-3)
print(json.dumps(failures))
"""


def test_every_python_block_runs_or_says_why_not(spark: object, tmp_path: Path) -> None:
    python = [b for b in _blocks() if b.lang == "python"]
    assert len(python) > 10, "the scan found too few Python blocks"
    unexplained = [b.page for b in python if b.not_run == ""]
    assert not unexplained, f"a 'not run:' marker without a reason: {unexplained}"
    pages: dict[str, list[str]] = {}
    for block in python:
        compile(block.body, block.page, "exec")
        pages.setdefault(block.page, []).append(
            _imports(block.body) if block.not_run is not None else block.body
        )
    with_spark = {page: blocks for page, blocks in pages.items() if SPARK.search("\n".join(blocks))}
    plain = [(page, "\n".join(blocks)) for page, blocks in pages.items() if page not in with_spark]
    ran = subprocess.run(
        [sys.executable, "-c", _RUNNER],
        input=json.dumps(plain),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-4000:]
    failures = json.loads(ran.stdout)
    for index, (page, blocks) in enumerate(sorted(with_spark.items())):
        failure = _run_with_spark(spark, page, "\n".join(blocks), tmp_path / f"page-{index}")
        if failure:
            failures[page] = failure
    assert not failures, "\n\n".join(f"{page}:\n{error}" for page, error in failures.items())


def _run_with_spark(spark: Any, page: str, source: str, root: Path) -> str | None:
    """Run a page's blocks on the shared session; its queries process what they have and
    stop. The traceback of a failure, or None."""
    (root / "data" / "in").mkdir(parents=True)
    (root / "data" / "in" / "events.json").write_text('{"sensor": "s1", "value": 1.0}\n')
    for path in EXAMPLE_PATHS:
        source = source.replace(f'"{path}', f'"{root}{path}').replace(
            f'"file://{path}', f'"file://{root}{path}'
        )
    try:
        exec(compile(source, page, "exec"), {"__name__": "__docs__", "spark": spark})
        for query in spark.streams.active:
            query.processAllAvailable()
    except Exception:
        return traceback.format_exc(limit=-3)
    finally:
        for query in spark.streams.active:
            query.stop()
    return None


def _makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return {
        m for line in re.findall(r"^([A-Za-z][\w .-]*):(?!=)", text, re.M) for m in line.split()
    }


def _firesteel_commands() -> set[str]:
    from importlib.metadata import entry_points

    from firesteel.cli.main import COMMANDS

    return set(COMMANDS) | {ep.name for ep in entry_points(group="firesteel.commands")}


def _missing(command: list[str], targets: set[str], commands: set[str]) -> str | None:
    """What ``command`` (one simple command's words) names that does not exist, or None."""
    while command and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", command[0]):
        command = command[1:]
    if not command:
        return None
    program, args = command[0], [a for a in command[1:] if not a.startswith(("-", "<", "["))]
    name = Path(program).name
    if program == "make":
        return next((f"make {a}" for a in args if a not in targets), None)
    if name == "firesteel":
        return f"firesteel {args[0]}" if args and args[0] not in commands else None
    if name.startswith("python") and "-m" in command:
        module = command[command.index("-m") + 1]
        return None if importlib.util.find_spec(module) is not None else f"python -m {module}"
    if "/" in program:
        spark_home = str(Path(importlib.import_module("pyspark").__file__).parent)
        path = Path(program.replace("$SPARK_HOME", spark_home))
        return None if (ROOT / path).exists() else program
    if program in BUILTINS or shutil.which(
        program, path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    ):
        return None
    return program


def test_every_command_a_bash_block_names_exists() -> None:
    targets, commands = _makefile_targets(), _firesteel_commands()
    checked, missing = 0, []
    for block in _blocks():
        if block.lang not in SHELL:
            continue
        text = re.sub(r"\$\((?:[^()]|\([^()]*\))*\)", "X", block.body.replace("\\\n", " "))
        for line in text.splitlines():
            words = shlex.split(line, comments=True)
            command: list[str] = []
            for word in [*words, ";"]:
                if word in {"&&", "||", ";", "|"}:
                    checked += 1
                    problem = _missing(command, targets, commands)
                    if problem:
                        missing.append(f"{block.page}: {problem}")
                    command = []
                else:
                    command.append(word)
    assert checked > 20, "the scan found too few commands"
    assert not missing, missing
