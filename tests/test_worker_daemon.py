"""firesteel's worker daemon (:mod:`firesteel.core.spark.daemon`) as Spark starts it."""

from __future__ import annotations

import struct
import subprocess
import sys


def test_the_daemon_starts_as_spark_runs_it_without_a_warning() -> None:
    # Spark runs `python -m <module>` and reads the port it listens on from its standard
    # output; the daemon stops when its standard input ends. A module the package had
    # already imported made Python warn at every start, in every worker log.
    started = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-m", "firesteel.core.spark.daemon"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert b"Warning" not in started.stderr, started.stderr.decode()[-2000:]
    assert len(started.stdout) == 4, started.stderr.decode()[-2000:]
    (port,) = struct.unpack("!i", started.stdout)
    assert 0 < port < 65536
