"""The one SparkSession a benchmark process uses, created on first use."""

from __future__ import annotations

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
        from firesteel.core.spark.session import local_session

        created = local_session(
            "firesteel-benchmarks",
            config={
                "spark.ui.showConsoleProgress": "false",
                "spark.driver.memory": "2g",
                "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
            },
        )
        _sessions.append(created)
    return _sessions[0]


def stop() -> None:
    """Stop the session if one was started; called once by the runner at the end."""
    while _sessions:
        _sessions.pop().stop()
