"""The ``firesteel`` command: ``firesteel demo`` runs the main example job,
``firesteel state <location>`` prints a state checkpoint, ``firesteel savepoint
create|inspect`` takes and shows savepoints. Separately installed
distributions add commands through the entry point group ``firesteel.commands``
(``firesteel pipeline`` comes with ``firesteel-pipelines``): each entry point is a
``main(argv) -> exit code`` function."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points


def _state(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="firesteel state",
        description=(
            "Print the keyed state stored under a location, whichever backend wrote it "
            "(heap, filesystem, or an installed one such as rocksdb)."
        ),
    )
    parser.add_argument("location", help="the state backend's path or URI")
    parser.add_argument("--operator", help="one operator (default: all)")
    parser.add_argument("--batch", type=int, help="version to read (default: latest complete)")
    parser.add_argument("--limit", type=int, default=50, help="rows to print (default 50)")
    args = parser.parse_args(argv)
    from firesteel.backends.inspect import read_state

    frame = read_state(args.location, operator=args.operator, batch=args.batch).to_pandas()
    with_all_columns = frame.head(args.limit).to_string(index=False)
    sys.stdout.write(f"{with_all_columns}\n({len(frame)} entries)\n")
    return 0


def _savepoint(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="firesteel savepoint",
        description="Take a portable savepoint of keyed state, or show one.",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="fs.NAME=VALUE",
        help="object-store setting by Hadoop's name (fs.s3a.endpoint=...), for every location",
    )
    commands = parser.add_subparsers(dest="action", required=True)
    create = commands.add_parser("create", help="write a savepoint of a state location")
    create.add_argument("location", help="the state backend's path or URI")
    create.add_argument("target", help="where the savepoint goes (path or URI; must be new)")
    create.add_argument(
        "--checkpoint", help="the query's Spark checkpoint: last committed batch, source positions"
    )
    create.add_argument("--batch", type=int, help="the committed batch (default: the last one)")
    create.add_argument("--operator", action="append", help="one operator (repeat; default: all)")
    show = commands.add_parser("inspect", help="print a savepoint's metadata and entries")
    show.add_argument("savepoint", help="the savepoint's path or URI")
    show.add_argument("--operator", help="one operator (default: all)")
    show.add_argument("--limit", type=int, default=50, help="rows to print (default 50)")
    args = parser.parse_args(argv)
    from firesteel.core.errors import FiresteelError

    try:
        return _run_savepoint(args)
    except FiresteelError as exc:
        # A refusal names its culprit and the fix: the message is the whole answer.
        parser.exit(1, f"{parser.prog}: error: {exc}\n")


def _run_savepoint(args: argparse.Namespace) -> int:
    settings = dict(setting.partition("=")[::2] for setting in args.conf)
    from firesteel.backends.savepoint import create as create_savepoint
    from firesteel.backends.savepoint import read_savepoint
    from firesteel.state.savepoint import open_savepoint

    if args.action == "create":
        made = create_savepoint(
            args.location,
            args.target,
            checkpoint=args.checkpoint,
            batch=args.batch,
            operators=args.operator,
            storage=settings,
            target_storage=settings,
        )
        sys.stdout.write(f"savepoint {made.id} of batch {made.batch} at {args.target}\n")
        return 0
    from firesteel.core.storage import StorageConfig

    storage = StorageConfig.of(settings)
    savepoint = open_savepoint(args.savepoint, storage)
    savepoint.verify()
    sys.stdout.write(json.dumps(savepoint.metadata, indent=2) + "\n")
    frame = read_savepoint(args.savepoint, operator=args.operator, storage=storage).to_pandas()
    sys.stdout.write(f"{frame.head(args.limit).to_string(index=False)}\n({len(frame)} entries)\n")
    return 0


def _installed_commands() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group="firesteel.commands")}


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``firesteel <command> ...``."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    installed = _installed_commands()
    commands = {
        "demo": "run the main example job",
        "state": "print a state checkpoint",
        "savepoint": "take or show a savepoint",
    }
    commands.update(
        {name: f"(from {ep.dist.name if ep.dist else ep.value})" for name, ep in installed.items()}
    )
    if not arguments or arguments[0] not in commands:
        usage = "\n".join(f"  {name:8} {text}" for name, text in commands.items())
        sys.stderr.write(f"usage: firesteel <command> [options]\n\ncommands:\n{usage}\n")
        return 0 if arguments[:1] in (["-h"], ["--help"]) else 2
    command, rest = arguments[0], arguments[1:]
    if command in installed:
        run: Callable[[list[str]], int] = installed[command].load()
        return run(rest)
    if command == "demo":
        from firesteel.examples.demo import main as demo

        return demo(rest)
    if command == "savepoint":
        return _savepoint(rest)
    return _state(rest)


if __name__ == "__main__":
    sys.exit(main())
