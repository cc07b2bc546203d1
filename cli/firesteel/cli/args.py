"""The argument parser every ``firesteel`` command builds: its help ends with an example."""

from __future__ import annotations

import argparse

EXIT_USAGE = 2
"""Exit code of a command line that cannot be run as given (argparse's own)."""


def command_parser(prog: str, description: str, example: str) -> argparse.ArgumentParser:
    """A command's parser; ``example`` (one line, or lines joined by a newline and two
    spaces) closes its help."""
    return argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
