"""The ``firesteel`` command: ``firesteel demo`` runs the main example job,
``firesteel state <location>`` prints a state checkpoint, ``firesteel savepoint
create|inspect`` takes and shows savepoints, ``firesteel status`` shows how a query is
doing, ``firesteel doctor`` checks the machine,
``firesteel --version`` names the release. Help goes to standard output; a command
line that cannot run exits 2 with the reason on standard error. Separately installed
distributions add commands through the entry point group ``firesteel.commands``
(``firesteel pipeline`` comes with ``firesteel-pipelines``): each entry point is a
``main(argv) -> exit code`` function."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from firesteel.cli.args import EXIT_USAGE, command_parser


def _state(argv: list[str]) -> int:
    parser = command_parser(
        "firesteel state",
        "Print the keyed state stored under a location, whichever backend wrote it "
        "(heap, filesystem, or an installed one such as rocksdb).",
        "firesteel state /tmp/firesteel-demo/state --operator sensor-statistics --limit 20",
    )
    parser.add_argument("location", help="the state backend's path or URI")
    parser.add_argument("--operator", help="one operator (default: all)")
    parser.add_argument("--batch", type=int, help="version to read (default: latest complete)")
    parser.add_argument("--limit", type=int, default=50, help="rows to print (default 50)")
    parser.add_argument(
        "--all",
        action="store_true",
        help="also show firesteel's own entries (batch clock, savepoint markers), named __...",
    )
    args = parser.parse_args(argv)
    from firesteel.backends.inspect import list_operators, read_state
    from firesteel.core.errors import FiresteelError
    from firesteel.state.descriptors import RESERVED_PREFIX

    try:
        if not args.operator and not list_operators(args.location):
            parser.exit(
                EXIT_USAGE, f"{parser.prog}: error: no firesteel state under {args.location}\n"
            )
        table = read_state(args.location, operator=args.operator, batch=args.batch)
    except FiresteelError as exc:
        parser.exit(EXIT_USAGE, f"{parser.prog}: error: {exc}\n")
    frame = table.to_pandas()
    if not args.all:
        frame = frame[~frame["state"].str.startswith(RESERVED_PREFIX)]
    with_all_columns = frame.head(args.limit).to_string(index=False)
    sys.stdout.write(f"{with_all_columns}\n({len(frame)} entries)\n")
    return 0


def _savepoint(argv: list[str]) -> int:
    parser = command_parser(
        "firesteel savepoint",
        "Take a portable savepoint of keyed state, stop a running query with one, or show one.",
        "firesteel savepoint create /data/state /data/savepoints/sp-1 --checkpoint /chk/job\n"
        "  firesteel savepoint stop /chk/job --to /data/savepoints/sp-2\n"
        "  firesteel savepoint inspect /data/savepoints/sp-1 --limit 20",
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
    stop = commands.add_parser(
        "stop",
        help="stop a running query after its batch, with a savepoint of its state",
        description="Ask the driver running the query of CHECKPOINT (a classic Spark session "
        "with a firesteel stateful operator) to let its batch finish, take a savepoint of "
        "that committed batch at PATH and stop the query; wait for its answer.",
    )
    stop.add_argument("checkpoint", help="the running query's Spark checkpoint location")
    stop.add_argument("--to", required=True, metavar="PATH", help="where the savepoint goes")
    stop.add_argument(
        "--timeout", type=float, default=600.0, metavar="S", help="seconds to wait (default 600)"
    )
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

    if args.action == "stop":
        return _stop(args)
    if args.action == "create":
        with _key_group_bar() as progress:
            made = create_savepoint(
                args.location,
                args.target,
                checkpoint=args.checkpoint,
                batch=args.batch,
                operators=args.operator,
                storage=settings,
                target_storage=settings,
                progress=progress,
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


@contextmanager
def _key_group_bar() -> Iterator[Callable[[str, int, int], None]]:
    """A progress bar on standard error (a terminal only) of the key groups a savepoint
    has written, one bar per operator; the key groups holding no state count as done."""
    from tqdm import tqdm

    bars: dict[str, Any] = {}

    def progress(operator: str, key_group: int, key_groups: int) -> None:
        if operator not in bars:
            bars[operator] = tqdm(
                total=key_groups, desc=f"savepoint {operator}", unit=" key groups", disable=None
            )
        bar = bars[operator]
        bar.update(key_group + 1 - bar.n)

    try:
        yield progress
        for bar in bars.values():
            bar.update(bar.total - bar.n)
    finally:
        for bar in bars.values():
            bar.close()


def _stop(args: argparse.Namespace) -> int:
    from firesteel.cli.status import require_checkpoint
    from firesteel.core.control import StopFailedError, request_stop, wait_for_answer
    from firesteel.core.errors import CheckpointNotFoundError

    try:
        require_checkpoint(args.checkpoint)
    except FileNotFoundError as exc:
        raise CheckpointNotFoundError(str(exc)) from exc
    request = request_stop(args.checkpoint, args.to)
    sys.stdout.write(f"stop request {request.id} sent to {args.checkpoint}; waiting\n")
    sys.stdout.flush()
    answer = wait_for_answer(args.checkpoint, request, args.timeout)
    if answer.error is not None:
        msg = f"the query did not stop with a savepoint: {answer.error}"
        raise StopFailedError(msg)
    sys.stdout.write(f"query stopped; savepoint of batch {answer.batch} at {answer.savepoint}\n")
    return 0


def _installed_commands() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group="firesteel.commands")}


COMMANDS = {
    "demo": "run the main example job (firesteel demo --help)",
    "state": "print the keyed state under a location",
    "savepoint": "take or show a savepoint, or stop a running query with one",
    "status": "how a query is doing, from its checkpoint (--json, --watch, --prometheus)",
    "ui": "a local web page of how the queries are doing (firesteel ui CHECKPOINT...)",
    "doctor": "check this machine for what a first run trips over",
}
"""The commands of the core distribution; installed distributions add theirs."""


def _usage(installed: dict[str, EntryPoint]) -> str:
    from firesteel.cli.doctor import distribution_version

    lines = [f"  {name:10} {text}" for name, text in COMMANDS.items()]
    for name, ep in sorted(installed.items()):
        dist = ep.dist.name if ep.dist else ep.value
        # A command's summary is its docstring's first clause, as the core commands' are.
        first = " ".join((ep.load().__doc__ or "").split(";")[0].split()).replace("``", "")
        summary = first[:1].lower() + first[1:]
        lines.append(f"  {name:10} {summary} (from {dist} {distribution_version(dist)})")
    return (
        "usage: firesteel [--version] <command> [options]\n\n"
        "Flink-grade delivery guarantees for PySpark Structured Streaming.\n\n"
        "commands:\n" + "\n".join(lines) + "\n\n"
        "`firesteel <command> --help` shows a command's options and an example.\n"
    )


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``firesteel <command> ...``; help and the version go to standard output."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    installed = _installed_commands()
    if arguments[:1] in (["-h"], ["--help"]):
        sys.stdout.write(_usage(installed))
        return 0
    if arguments[:1] == ["--version"]:
        from firesteel.cli.doctor import distribution_version

        sys.stdout.write(f"firesteel {distribution_version('firesteel')}\n")
        return 0
    if not arguments or (arguments[0] not in COMMANDS and arguments[0] not in installed):
        unknown = f"firesteel: error: unknown command {arguments[0]!r}\n\n" if arguments else ""
        sys.stderr.write(unknown + _usage(installed))
        return EXIT_USAGE
    command, rest = arguments[0], arguments[1:]
    if command in installed:
        run: Callable[[list[str]], int] = installed[command].load()
        return run(rest)
    if command == "demo":
        from firesteel.examples.demo import main as demo

        return demo(rest)
    if command == "savepoint":
        return _savepoint(rest)
    if command == "status":
        from firesteel.cli.status import main as status

        return status(rest)
    if command == "ui":
        from firesteel.cli.ui import main as ui

        return ui(rest)
    if command == "doctor":
        from firesteel.cli.doctor import main as doctor

        return doctor(rest)
    return _state(rest)


if __name__ == "__main__":
    sys.exit(main())
