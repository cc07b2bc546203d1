"""The one SparkSession a benchmark process uses, created on first use."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

# At most one session per process; a list so the functions below need no `global`.
_sessions: list[SparkSession] = []
_connect_urls: list[str] = []


def session() -> SparkSession:
    """A ``local[2]`` session with firesteel registered, shared by every benchmark group.

    Created on the first call (so groups that need no Spark start no JVM) and
    stopped by the runner when the process is done with it. Its Python workers fork
    from firesteel's worker daemon (``firesteel.core.WORKER_DAEMON``), as the operations
    guide tells every firesteel job to run; a side without Python never starts one. Its driver runs
    the Spark Connect server on a free port (:func:`connect_url`), idle unless
    a workload sends through it.
    """
    if not _sessions:
        from firesteel.core.spark.session import WORKER_DAEMON, local_session
        from firesteel.sinks.fanout import CONNECT_PLUGIN
        from firesteel.testing.ports import free_port

        port = free_port()
        created = local_session(
            "firesteel-benchmarks",
            config={
                "spark.ui.showConsoleProgress": "false",
                "spark.driver.memory": "2g",
                "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
                "spark.plugins": CONNECT_PLUGIN,
                "spark.connect.grpc.binding.address": "127.0.0.1",
                "spark.connect.grpc.binding.port": str(port),
                **WORKER_DAEMON,
            },
        )
        _sessions.append(created)
        _connect_urls[:] = [f"sc://127.0.0.1:{port}"]
    return _sessions[0]


def connect_url() -> str:
    """The Spark Connect URL of :func:`session`'s driver (starting the session if needed)."""
    session()
    return _connect_urls[0]


def stop() -> None:
    """Stop the session if one was started; called once by the runner at the end."""
    while _sessions:
        _sessions.pop().stop()


def available_now(
    build: Callable[[], DataStreamWriter], checkpoint: Path
) -> tuple[StreamingQuery, float]:
    """Run the writer ``build`` returns with ``Trigger.AvailableNow`` to its end.

    Returns the finished query and the seconds from before ``build`` (building the
    reader may plan a Python data source, which a run pays) to the last batch's end.
    """
    started = time.perf_counter()
    query = build().option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    query.awaitTermination()
    return query, time.perf_counter() - started


def rows_read(query: StreamingQuery) -> int:
    """The input rows of every batch ``query`` ran, by Spark's own progress reports."""
    return sum(progress["numInputRows"] for progress in query.recentProgress)
