"""Where a streaming job's memory goes: PSS per process role of a Kafka -> Kafka job.

``python -m benchmarks.memory [--records N] [--config KEY=VALUE ...]`` starts the
benchmarks' broker, fills a 4-partition topic with ``N`` x 100 B records and runs
the ``peers`` group's firesteel job (:mod:`benchmarks.peers.firesteel_job`:
exactly-once, ``LOCAL_PROFILE``, 1 s triggers, 8 batches) while it reads every
process of the job's tree from ``/proc/<pid>/smaps_rollup`` every half second.
It prints the peak of the tree's PSS and, at that moment, each role's share (the
JVM, the driver's Python, the worker daemon, the Python workers forked from it,
and the Python processes Spark starts for a data source: its planner, the
streaming source's runner, the sink's commit runner), then the JVM's own account
of its heap, metaspace and code cache (``jcmd``). ``--config`` entries are handed
to the job as extra Spark settings (``FIRESTEEL_BENCH_CONFIG``), to try what the
profile could lower. The figures depend on the load: report it beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import psutil

from benchmarks.bench_kafka import fill_topic
from benchmarks.broker import kafka_broker
from benchmarks.peers.job import Job
from benchmarks.peers.watch import Watcher
from firesteel.testing.kafka import create_topic

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 4
BATCHES = 8
RECORD_BYTES = 100
MB = 1024 * 1024


def role(process: psutil.Process) -> str:
    """What part of a Spark job ``process`` is, from its command line and its parent's."""
    try:
        command = process.cmdline()
        parent = process.parent()
        parent_command = parent.cmdline() if parent is not None else []
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "gone"
    if command and Path(command[0]).name == "java":
        return "JVM"
    if any("firesteel_job" in part for part in command):
        return "driver Python"
    if any("daemon" in part for part in command[1:]):
        if parent_command and Path(parent_command[0]).name == "java":
            return "worker daemons"
        return "Python workers (forked by a daemon)"
    return "Python runners (planner, source runner, commit runner)"


def pss(pid: int) -> dict[str, int]:
    """The ``Pss*`` lines of ``/proc/<pid>/smaps_rollup``, in bytes."""
    found: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            name, _, rest = line.partition(":")
            if name.startswith("Pss"):
                found[name] = int(rest.split()[0]) * 1024
    return found


def sample(root: psutil.Process) -> tuple[int, dict[str, dict[str, float]]]:
    """The tree's PSS and, per role, its processes' PSS (MB) and their count."""
    total = 0
    roles: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for process in [root, *root.children(recursive=True)]:
        try:
            figures = pss(process.pid)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        name = role(process)
        total += figures.get("Pss", 0)
        roles[name]["processes"] += 1
        for key, value in figures.items():
            roles[name][key] += value / MB
    return total, {k: dict(v) for k, v in roles.items()}


def jvm_account(pid: int) -> dict[str, str]:
    """``jcmd``'s heap, metaspace and code cache summaries of the JVM ``pid``."""
    account = {}
    for command in ("GC.heap_info", "VM.metaspace summary", "Compiler.codecache"):
        done = subprocess.run(
            ["jcmd", str(pid), *command.split()], capture_output=True, text=True, check=False
        )
        lines = [line.strip() for line in done.stdout.splitlines()[1:] if line.strip()]
        account[command] = " | ".join(lines[:6])
    return account


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    extra = dict(entry.split("=", 1) for entry in args.config)
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "FIRESTEEL_BENCH_CONFIG": json.dumps(extra),
    }
    with kafka_broker() as bootstrap, tempfile.TemporaryDirectory() as work:
        source = create_topic(bootstrap, PARTITIONS)
        target = create_topic(bootstrap, PARTITIONS)
        fill_topic(bootstrap, source, args.records, RECORD_BYTES)
        command = [
            sys.executable,
            "-m",
            "benchmarks.peers.firesteel_job",
            "identity",
            "--bootstrap",
            bootstrap,
            "--source",
            source,
            "--target",
            target,
            "--checkpoint",
            f"{work}/checkpoint",
            "--trigger",
            "1",
            "--max-per-batch",
            str(args.records // BATCHES),
        ]
        watcher = Watcher(bootstrap, target, PARTITIONS, counts=False, stamps=False)
        peak, at_peak, jvm = 0, {}, {}
        started = time.time()
        try:
            with Job(command, cwd=ROOT, env=env) as job:
                job.wait_ready(600)
                assert job._process is not None
                root = psutil.Process(job._process.pid)
                while watcher.output.records < args.records:
                    job.check(may_end=False)
                    time.sleep(0.5)
                    total, roles = sample(root)
                    if total > peak:
                        peak, at_peak = total, roles
                java = [p for p in root.children(recursive=True) if role(p) == "JVM"]
                if java:
                    jvm = jvm_account(java[0].pid)
        finally:
            watcher.close()
    print(f"records {args.records}, {time.time() - started:.0f} s, load {os.getloadavg()[0]:.1f}")
    print(f"extra settings: {extra or 'none'}")
    print(f"peak PSS of the job's process tree: {peak / MB:.0f} MB; at that moment:")
    for name, figures in sorted(at_peak.items(), key=lambda item: -item[1].get("Pss", 0)):
        print(
            f"  {name}: {figures.get('Pss', 0):.0f} MB in {figures['processes']:.0f} processes "
            f"(anon {figures.get('Pss_Anon', 0):.0f}, file {figures.get('Pss_File', 0):.0f})"
        )
    for what, text in jvm.items():
        print(f"  jcmd {what}: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
