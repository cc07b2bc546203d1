"""The one SparkSession a benchmark process uses, created on first use."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# At most one session per process; a list so the functions below need no `global`.
_sessions: list[SparkSession] = []


def session() -> SparkSession:
    """A ``local[2]`` session with firesteel registered, shared by every benchmark group.

    Created on the first call (so groups that need no Spark start no JVM) and
    stopped by the runner when the process is done with it.
    """
    if not _sessions:
        # Spark starts Python workers with PYSPARK_PYTHON; they must be this
        # interpreter, which has firesteel and its dependencies installed.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        from firesteel.core import register

        created = (
            SparkSession.builder.master("local[2]")
            .appName("firesteel-benchmarks")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", "2g")
            .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
            .getOrCreate()
        )
        created.sparkContext.setLogLevel("ERROR")
        register(created)
        _sessions.append(created)
    return _sessions[0]


def stop() -> None:
    """Stop the session if one was started; called once by the runner at the end."""
    while _sessions:
        _sessions.pop().stop()
