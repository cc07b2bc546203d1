"""The ``firesteel`` command: ``firesteel demo`` runs the main example job,
``firesteel state <location>`` prints a state checkpoint."""

from __future__ import annotations

import argparse
import sys


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


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``firesteel <command> ...``."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    commands = {"demo": "run the main example job", "state": "print a state checkpoint"}
    if not arguments or arguments[0] not in commands:
        usage = "\n".join(f"  {name:8} {text}" for name, text in commands.items())
        sys.stderr.write(f"usage: firesteel <command> [options]\n\ncommands:\n{usage}\n")
        return 0 if arguments[:1] in (["-h"], ["--help"]) else 2
    command, rest = arguments[0], arguments[1:]
    if command == "demo":
        from firesteel.examples.demo import main as demo

        return demo(rest)
    return _state(rest)


if __name__ == "__main__":
    sys.exit(main())
