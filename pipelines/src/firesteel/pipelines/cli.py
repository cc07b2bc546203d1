"""The pipeline commands.

``firesteel pipeline verify BLUEPRINT [--conf FILE]... [key=value]... [--show STREAMLET]``
verifies the blueprint and its configuration, reporting every problem at once,
then prints each streamlet with its ports, topics and guarantee (and, with
``--show``, one streamlet's effective configuration, secrets masked).

``firesteel run-local BLUEPRINT [--conf FILE]... [--work DIR] [key=value]...``
verifies, prints the topology, and runs every streamlet in its own process
(:mod:`firesteel.pipelines.runner`), on local or Kafka topics, until Ctrl-C; every
``--progress`` seconds (default 30) it prints each streamlet's last batch, rows in and
out and lag (:mod:`firesteel.pipelines.progress`).

``firesteel run BLUEPRINT --master spark://host:7077 [...]`` does the same with
each streamlet its own Spark application on that standalone cluster (drivers
here, in client mode; see :class:`~firesteel.pipelines.runner.LocalRunner`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from firesteel.pipelines.config import PipelineConfig
from firesteel.pipelines.errors import BlueprintError, ConfigurationError
from firesteel.pipelines.progress import ProgressPrinter
from firesteel.pipelines.runner import LocalRunner, load
from firesteel.pipelines.verify import VerifiedBlueprint
from firesteel.pipelines.worklock import WorkFolderInUseError


def _topology(verified: VerifiedBlueprint, config: PipelineConfig) -> str:
    lines = [
        f"blueprint {verified.blueprint.name}: {len(verified.streamlets)} streamlets, "
        f"{config.guarantee()} end to end"
    ]
    for name, cls in verified.streamlets.items():
        guarantee = config.streamlet(name).checkpointing.guarantee
        lines.append(f"  {name} ({verified.blueprint.streamlets[name]}), {guarantee}")
        for inlet in cls.shape.inlets:
            lines.append(
                f"    <- {inlet.name} [{inlet.codec.format}] from topic "
                f"{verified.topic_of(name, inlet.name)}"
            )
        for outlet in cls.shape.outlets:
            topic = verified.topic_of(name, outlet.name) or "(not connected)"
            lines.append(f"    -> {outlet.name} [{outlet.codec.format}] to topic {topic}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Verify a pipeline's blueprint (``firesteel pipeline verify``); returns the exit code."""
    if argv[:1] != ["verify"]:
        sys.stderr.write(
            "usage: firesteel pipeline verify BLUEPRINT [--conf FILE]... [--show STREAMLET] "
            "[key=value]...\n"
        )
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    check = argparse.ArgumentParser(
        prog="firesteel pipeline verify", description="verify a blueprint and its configuration"
    )
    check.add_argument("blueprint", help="the blueprint file (HOCON)")
    check.add_argument("--conf", action="append", default=[], help="a configuration file")
    check.add_argument("--show", help="print this streamlet's effective configuration")
    check.add_argument("settings", nargs="*", help="key=value settings (win over files)")
    args = check.parse_intermixed_args(argv[1:])
    try:
        verified, config = load(Path(args.blueprint), args.conf, args.settings)
    except (BlueprintError, ConfigurationError) as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    sys.stdout.write(_topology(verified, config) + "\n")
    if args.show:
        if args.show not in verified.streamlets:
            sys.stderr.write(f"no streamlet {args.show!r} in the blueprint\n")
            return 1
        sys.stdout.write(json.dumps(config.effective(args.show), indent=2, default=str) + "\n")
    return 0


def run_local(argv: list[str]) -> int:
    """Run a pipeline on this machine, one supervised process per streamlet; returns the
    exit code."""
    return _run(argv, "firesteel run-local", cluster=False)


def run(argv: list[str]) -> int:
    """Run a pipeline on a Spark standalone cluster (``--master URL``), one application per
    streamlet; returns the exit code."""
    return _run(argv, "firesteel run", cluster=True)


def _run(argv: list[str], prog: str, *, cluster: bool) -> int:
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("blueprint", help="the blueprint file (HOCON)")
    if cluster:
        parser.add_argument(
            "--master", required=True, help="the Spark master, e.g. spark://host:7077"
        )
    parser.add_argument("--conf", action="append", default=[], help="a configuration file")
    parser.add_argument(
        "--work",
        help="topics, checkpoints and logs (default: ./.firesteel/<blueprint file name>)",
    )
    parser.add_argument(
        "--progress",
        type=float,
        default=30.0,
        metavar="S",
        help="print each streamlet's last batch, rows in and out and lag every S seconds "
        "(default 30; 0: never)",
    )
    parser.add_argument("settings", nargs="*", help="key=value settings (win over files)")
    args = parser.parse_intermixed_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    blueprint = Path(args.blueprint)
    work = Path(args.work) if args.work else Path(".firesteel") / blueprint.stem
    try:
        runner = LocalRunner(
            blueprint, work, args.conf, args.settings, master=args.master if cluster else None
        )
    except (BlueprintError, ConfigurationError) as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    sys.stdout.write(_topology(runner.verified, runner.config) + "\n")
    sys.stdout.write(
        f"topics: {runner.work / 'topics'}\nlogs: {runner.work / 'logs'}\n"
        "stop with Ctrl-C; a restart resumes where this run stopped\n"
    )
    sys.stdout.flush()
    try:
        runner.start()
    except WorkFolderInUseError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    if not args.progress:
        return runner.wait()
    printer = ProgressPrinter(runner.work, args.progress, sys.stdout).start()
    try:
        return runner.wait()
    finally:
        printer.stop()
