"""A wall clock set off for every process of a crash-test run: the job's Python driver,
Spark's JVM and the Python workers it starts.

:func:`clock_offset` returns the environment a :class:`~firesteel.testing.CrashHarness`
run is started with. It preloads `libfaketime <https://github.com/wolfcw/libfaketime>`_
(the build shipped in the ``libfaketime`` wheel), which shifts what ``clock_gettime``,
``gettimeofday`` and ``time`` return for the realtime clock, in the process and every
child that inherits the environment: Python's :func:`time.time` (firesteel's write
stamps, file names) as well as the JVM's ``System.currentTimeMillis`` (Spark's batch
timestamps, trigger times, ``current_timestamp()``).

Kept real on purpose: the monotonic clock (timeouts and Spark's own intervals keep
working; a user's NTP step does not move it either) and file modification times read
back with ``stat`` (the kernel stamps files with its own clock, as on a machine whose
clock was set back after they were written).

Not usable with librdkafka (confluent-kafka): under libfaketime every request of a
client times out at once (``list_topics``, ``get_watermark_offsets``: "Local: Timed
out", checked with libfaketime's monotonic and pthread options), so the Kafka crash
tests do not set the clock off.
"""

from __future__ import annotations

import os
from pathlib import Path

from firesteel.core.errors import MissingDependencyError

LIBRARY = Path("vendor") / "libfaketime" / "src" / "libfaketime.so.1"
"""Where the ``libfaketime`` wheel keeps the shared library, inside its package."""


def faketime_library() -> Path:
    """The libfaketime shared library of the installed ``libfaketime`` wheel."""
    try:
        import libfaketime
    except ModuleNotFoundError as exc:
        raise MissingDependencyError(exc.name or "libfaketime", "firesteel[test]") from exc
    return Path(libfaketime.__file__).parent / LIBRARY


def clock_offset(seconds: float) -> dict[str, str]:
    """The environment of a run whose processes see the wall clock off by ``seconds``."""
    preload = os.environ.get("LD_PRELOAD", "")
    return {
        "LD_PRELOAD": os.pathsep.join(p for p in (str(faketime_library()), preload) if p),
        "FAKETIME": f"{seconds:+.3f}",
        # Else CLOCK_MONOTONIC moves too, which libfaketime's documentation warns can hang a JVM.
        "DONT_FAKE_MONOTONIC": "1",
        # The "monotonic fix" makes every JVM clock call slow (a JVM start took 4x longer).
        "FAKETIME_FORCE_MONOTONIC_FIX": "0",
        "NO_FAKE_STAT": "1",
    }
