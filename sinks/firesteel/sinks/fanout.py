"""Run a batch commit's sends as a Spark job across the executors, through Spark Connect.

PySpark's Python data source API calls a streaming writer's ``commit`` in a
Python worker of the driver, with no SparkSession: a write-ahead-log sink
that sends from there funnels every committed segment through one process.
Spark Connect is the one way such a worker can reach the cluster: when the
job's driver runs the Connect server as a plugin,

    spark.plugins=org.apache.spark.sql.connect.SparkConnectPlugin
    spark.connect.grpc.binding.port=15002

the commit connects to its own driver (``sc://localhost:15002``: the commit
runs on the driver's host) and runs
one Spark task per segment (:func:`run_on_executors`), on the same
SparkContext and executors as the query. The query's thread waits in the
commit meanwhile, so the send job has the executors to itself.

A send task that fails fails the job after Spark's task retries, and the
commit raises :class:`~firesteel.core.errors.SinkError`; the batch then
fails and re-runs, and the tasks that had finished are not repeated, because
each one records its segment as its last step. A killed driver takes the
send job with it, as it takes the query.
"""

from __future__ import annotations

import logging
import os
import socket
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from firesteel.core.spi import ConfigError, SinkError, option

logger = logging.getLogger(__name__)

CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
"""The ``spark.plugins`` entry that runs the Spark Connect server inside the driver."""

CONNECT_RETRIES = 4
"""Connection attempts (50 ms, then 4x longer each time: about 4 s in all) before giving
up: the client's default tolerates 10 minutes, which would hold the batch that long."""

_RESULT_SCHEMA = "task long, pid long, host string"


def send_connect_option(applies: str) -> Any:
    """Declare a write-ahead-log sink's ``send.connect`` option (see :func:`option`);
    ``applies`` names the options under which the sink logs ahead."""
    return option(
        None,
        name="send.connect",
        doc=f"{applies}: Spark Connect URL of the job's own driver (sc://localhost:15002); "
        "each committed segment is then sent by its own Spark task, across the executors, "
        "instead of one after another in the commit",
    )


def check_send_connect(url: str | None, *, logs_ahead: bool, otherwise: str, use: str) -> None:
    """Check a sink's ``send.connect`` option (checked before the first batch, not at its
    commit): unset, or a Spark Connect URL (:func:`check_connect_url`) on a sink whose
    options make it log ahead (``logs_ahead``; ``otherwise`` says why the option does
    nothing then, ``use`` which options make it log ahead)."""
    if url is None:
        return
    if not logs_ahead:
        msg = (
            "option 'send.connect' moves the write-ahead log's sends onto the executors; "
            f"{otherwise}: drop the option or use {use}"
        )
        raise ConfigError(msg)
    check_connect_url(url, "send.connect")


def check_connect_url(url: str, name: str) -> None:
    """Raise :class:`ConfigError` naming the option ``name`` unless ``url`` is a Spark
    Connect URL and the Spark Connect client can be imported."""
    if not url.startswith("sc://") or len(url) <= len("sc://"):
        msg = (
            f"option {name!r}: {url!r} is not a Spark Connect URL; give the job's own "
            "driver as sc://localhost:<spark.connect.grpc.binding.port>"
        )
        raise ConfigError(msg)
    try:
        import pyspark.sql.connect.session  # noqa: F401
    except ImportError as exc:
        msg = (
            f"option {name!r} needs the Spark Connect client, which is not installed: "
            f"pip install 'firesteel[connect]' ({exc})"
        )
        raise ConfigError(msg) from exc


def run_on_executors(url: str, tasks: Sequence[Callable[[], None]], what: str) -> None:
    """Run each of ``tasks`` (picklable, no arguments) as its own Spark task.

    ``url`` names the Spark Connect server of the job's own driver; ``what``
    names the work in errors and logs. Returns once every task returned;
    raises :class:`SinkError` naming ``url`` when the server cannot be
    reached (with the configuration it needs) or when a task failed (with
    its error).
    """
    if not tasks:
        return
    from pyspark.sql.connect.client.retries import DefaultPolicy
    from pyspark.sql.connect.session import SparkSession

    # Not SparkSession.builder.remote(): that marks the whole process as a Spark Connect
    # client (SPARK_CONNECT_MODE_ENABLED), and Spark reuses this worker for other work.
    session = SparkSession(connection=url)
    try:
        client: Any = session.client
        client.set_retry_policies([DefaultPolicy(max_retries=CONNECT_RETRIES)])
        # A send may take minutes; a reattachable execution would also leave the server
        # releasing results of a session that has already stopped.
        client.disable_reattachable_execute()
        jobs = session.range(0, len(tasks), 1, len(tasks))
        done = jobs.mapInArrow(_runner(tasks), _RESULT_SCHEMA).collect()
    except Exception as exc:
        raise _failure(url, what, exc) from exc
    finally:
        session.stop()
    places = Counter(f"{row.host}:{row.pid}" for row in done)
    if sorted(row.task for row in done) != list(range(len(tasks))):
        msg = f"{what}: the send job on {url} reported tasks {[r.task for r in done]}"
        raise SinkError(msg)
    logger.info(
        "%s: %d tasks ran on %s, the commit on %s:%d",
        what,
        len(tasks),
        dict(places),
        socket.gethostname(),
        os.getpid(),
    )


def _runner(tasks: Sequence[Callable[[], None]]) -> Callable[[Iterator[Any]], Iterator[Any]]:
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for batch in batches:
            ran = batch.column("id").to_pylist()
            for index in ran:
                tasks[index]()
            yield pa.RecordBatch.from_pydict(
                {
                    "task": pa.array(ran, pa.int64()),
                    "pid": pa.array([os.getpid()] * len(ran), pa.int64()),
                    "host": pa.array([socket.gethostname()] * len(ran), pa.string()),
                }
            )

    return run


def _failure(url: str, what: str, exc: Exception) -> SinkError:
    text = str(exc)
    if "UNAVAILABLE" in text or "failed to connect" in text.lower():
        msg = (
            f"{what}: cannot reach Spark Connect at {url} ({text.splitlines()[0]}). "
            f"Start the job with spark.plugins={CONNECT_PLUGIN} and "
            "spark.connect.grpc.binding.port set to the URL's port (the commit runs on the "
            "driver, so sc://localhost:<port> reaches it)"
        )
        return SinkError(msg)
    msg = f"{what}: the send job on {url} failed: {text}"
    return SinkError(msg)
