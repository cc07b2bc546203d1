"""The runner's reaper: no streamlet outlives the runner that started it.

Each streamlet runs in a process group of its own (so that the runner can kill
one streamlet whole: its driver and its JVM), which also puts it out of reach of
a signal to the runner's group. The runner starts this small process in a
session of its own and tells it, on a pipe, each streamlet group it starts
(``+PGID``) and reaps (``-PGID``). When the pipe ends, because the runner
stopped or died (even by SIGKILL, which no handler sees), the reaper SIGKILLs
every group still listed and exits. A streamlet's Python workers leave with
its JVM (PySpark's worker daemon exits when the JVM closes its input).

Run as ``python -m firesteel.pipelines.reaper``; reads its standard input.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys


def reap(lines: list[str] | None = None) -> set[int]:
    """Follow the runner's ``+PGID`` / ``-PGID`` lines until they end, then SIGKILL each
    group still listed; returns those groups."""
    groups: set[int] = set()
    for line in lines if lines is not None else sys.stdin:
        sign, number = line[:1], line[1:].strip()
        if not number.isdigit():
            continue
        if sign == "+":
            groups.add(int(number))
        elif sign == "-":
            groups.discard(int(number))
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    return groups


if __name__ == "__main__":
    # The runner's Ctrl-C reaches its terminal's foreground group; the reaper waits for
    # the pipe to end instead, so it never leaves before the streamlets it guards.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    reap()
