"""``python -m benchmarks.savepoint_process STATE TARGET``: a savepoint write in a process of
its own, so its peak memory is its own.

Takes a savepoint of batch 0 of the state under ``STATE`` at ``TARGET`` with
:func:`firesteel.backends.savepoint.create` and prints one JSON line: the
seconds the write took (the interpreter's start and imports left out) and the
process's peak resident set size in MB. The state group's savepoint write
workloads run it for the peak RSS, since the benchmark's own process holds the
checkpoint's keys and would hide the writer's figure.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from firesteel.backends.savepoint import create


def main(argv: list[str]) -> int:
    """Write the savepoint; print ``{"seconds": ..., "peak_rss_mb": ...}``."""
    state, target = argv
    started = time.perf_counter()
    create(state, target, batch=0)
    elapsed = time.perf_counter() - started
    print(json.dumps({"seconds": elapsed, "peak_rss_mb": _peak_rss_kb() / 1024}))
    return 0


def _peak_rss_kb() -> int:
    """This process image's peak RSS (``VmHWM``). Not ``getrusage``'s ``ru_maxrss``: Linux
    carries that over from the process that forked this one (the benchmark, holding
    gigabytes of keys) across ``exec``."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    msg = "/proc/self/status has no VmHWM line: peak RSS is measured on Linux only"
    raise RuntimeError(msg)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
