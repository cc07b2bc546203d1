"""Helpers for the job scripts the crash-test harness runs.

A job script is an ordinary program (``python job.py <args>``) that:

1. builds its session with :func:`job_session`, which reads the master the
   harness chose (``local[2,4]`` or a standalone cluster) and forwards the
   fault-injection environment to executors;
2. processes all available input from a *fixed* checkpoint location
   (``.trigger(availableNow=True)`` then ``awaitTermination()``, as
   :func:`run_available` does, or ``processAllAvailable()`` then ``stop()``);
3. exits 0 when done. Any other exit is a failure the harness reports, except
   the SIGKILLs it caused itself.

Example::

    from firesteel.testing.jobs import job_session, read_parquet_files, write_files_exactly_once

    spark = job_session("files-job")
    records = read_parquet_files(spark, src, max_files_per_batch="3")
    write_files_exactly_once(spark, records, out, ck)
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from firesteel.testing.daemon import DAEMON_CONFIG
from firesteel.testing.s3 import SETTINGS_ENV
from firesteel.testing.together import start_in_group

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter

MASTER_ENV = "FIRESTEEL_SPARK_MASTER"
"""The Spark master the harness asks the job to use."""

DEFAULT_MASTER = "local[2,4]"
"""Two cores, up to four attempts per task, so an injected task failure is retried."""

QUICK_START_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""JVM flags for short test jobs: C1 only and a serial GC start faster on a busy machine,
which matters when a crash test restarts the job a dozen times."""

QUICK_START_SQL: Mapping[str, str] = {
    "spark.sql.icu.caseMappings.enabled": "false",
}
"""Spark settings for short test jobs that change no result of theirs.

``upper()``/``lower()`` use the JVM's case mappings instead of ICU's: the first
ICU mapping in a JVM initialises ``CollationAwareUTF8String``, which runs ICU's
dictionary break iterators through the interpreter for 1.5-3 s of the first
batch on 2 cores; for the ASCII text of the test jobs both give the same."""

FORWARDED_PREFIXES = ("FIRESTEEL_",)
"""Environment variables forwarded to executors on a cluster (the fault hook reads them)."""


def job_session(
    app_name: str, shuffle_partitions: int = 2, extra_config: Mapping[str, str] | None = None
) -> SparkSession:
    """The SparkSession for a harness job, with every firesteel connector registered.

    On a standalone cluster, executors are separate JVMs started by the
    workers: they get ``PYSPARK_PYTHON`` (this interpreter) and every
    ``FIRESTEEL_*`` variable through ``spark.executorEnv.*``, so fault points
    fire on executors too and the harness can recognise executor processes.
    When ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` name this interpreter (or
    are unset), Spark gets :func:`~firesteel.testing.workerpython.worker_python`
    instead (:func:`~firesteel.testing.workerpython.use_worker_python`), so its
    Python processes import PySpark from site-packages, compiled.
    The driver JVM maps the class archive the harness names, if any
    (:mod:`firesteel.testing.jvm`), and both JVMs keep their scratch folders in
    ``TMPDIR`` (:func:`java_temp_option`). The session gets
    :data:`QUICK_START_SQL` and :data:`~firesteel.testing.daemon.DAEMON_CONFIG`, which
    ``extra_config`` may override, and, when the harness
    gives a job an S3 server (:meth:`~firesteel.testing.s3.S3Server.job_env`), its
    settings as ``spark.hadoop.fs.s3a.*``.
    """
    from firesteel.core.spark.session import LOOPBACK, local_session
    from firesteel.testing.jvm import driver_java_options
    from firesteel.testing.workerpython import use_worker_python

    master = os.environ.get(MASTER_ENV, DEFAULT_MASTER)
    use_worker_python()
    python = os.environ["PYSPARK_PYTHON"]
    jvm = f"{QUICK_START_JVM} {java_temp_option()}".strip()
    config = {
        **LOOPBACK,
        **QUICK_START_SQL,
        **DAEMON_CONFIG,
        "spark.executorEnv.PYSPARK_PYTHON": python,
        "spark.driver.extraJavaOptions": f"{jvm} {driver_java_options()}".strip(),
        "spark.executor.extraJavaOptions": jvm,
    }
    if master.startswith("spark://"):
        config.update(
            {
                "spark.executor.memory": "512m",
                "spark.executor.cores": "1",
                "spark.cores.max": "2",
                "spark.task.maxFailures": "4",
            }
        )
        for key, value in os.environ.items():
            if key.startswith(FORWARDED_PREFIXES):
                config[f"spark.executorEnv.{key}"] = value
    s3_settings = os.environ.get(SETTINGS_ENV)
    if s3_settings:
        config.update({f"spark.hadoop.{k}": v for k, v in json.loads(s3_settings).items()})
    config.update(extra_config or {})
    return local_session(
        app_name,
        master=master,
        shuffle_partitions=shuffle_partitions,
        log_level="WARN",
        config=config,
    )


def suite_session(app_name: str, config: Mapping[str, str] | None = None) -> SparkSession:
    """The ``local[2]`` SparkSession a test process shares between its tests.

    Every firesteel connector registered, the driver on 127.0.0.1, temporary
    checkpoints deleted, Spark's Python processes started through
    :func:`~firesteel.testing.workerpython.worker_python`, and the driver JVM
    started with :data:`QUICK_START_JVM`, workers forked from
    :mod:`firesteel.testing.daemon`: a suite's queries are small and each
    plan runs a few times, so C2's compilations never paid back. Measured on 51
    tests of the suite (2 cores): the session JVM's CPU fell from 66 s to 40 s.
    ``query.stop()`` gives up after 5 minutes (``spark.sql.streaming.stopTimeout``;
    Spark waits forever by default): a test whose query hangs in a batch then fails
    instead of holding its test process, whose next Py4J call would wait behind the
    stop for good (CI: a whole worker stuck for 30 minutes). ``config`` is applied last.
    """
    from firesteel.core.spark.session import LOOPBACK, local_session
    from firesteel.testing.workerpython import use_worker_python

    use_worker_python()
    return local_session(
        app_name,
        config={
            **LOOPBACK,
            "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
            "spark.sql.streaming.stopTimeout": "300000",
            "spark.driver.extraJavaOptions": QUICK_START_JVM,
            **DAEMON_CONFIG,
            **(config or {}),
        },
    )


def sends_on_executors() -> tuple[dict[str, str], dict[str, str]]:
    """The session settings that run the Spark Connect server inside the job's driver on
    a free port, and the write-ahead sink option ``send.connect`` pointing at it
    (:mod:`firesteel.sinks.fanout`): ``(extra_config for job_session, sink options)``."""
    from firesteel.sinks.fanout import CONNECT_PLUGIN
    from firesteel.testing.ports import free_port

    server = free_port()
    extra = {
        "spark.plugins": CONNECT_PLUGIN,
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(server),
    }
    return extra, {"send.connect": f"sc://127.0.0.1:{server}"}


def java_temp_option() -> str:
    """``-Djava.io.tmpdir`` set to ``TMPDIR`` when the environment names one, else ``""``.

    Java ignores ``TMPDIR``, so a killed driver would leave Spark's ``spark-*`` and
    ``artifacts-*`` folders in ``/tmp``; the harness points ``TMPDIR`` into its workdir.
    """
    folder = os.environ.get("TMPDIR")
    return f"-Djava.io.tmpdir={folder}" if folder else ""


def read_parquet_files(spark: SparkSession, source: str, max_files_per_batch: str) -> DataFrame:
    """The ``firesteel.files`` stream of the Parquet files in ``source``, at most
    ``max_files_per_batch`` files (an option string, as given on the command line) per batch."""
    return (
        spark.readStream.format("firesteel.files")
        .option("format", "parquet")
        .option("max.files.per.batch", max_files_per_batch)
        .load(source)
    )


def read_kafka_topic(
    spark: SparkSession, bootstrap: str, topic: str, checkpoint: str, per_batch: str
) -> DataFrame:
    """The ``firesteel.kafka`` stream of ``topic`` from its earliest offsets, at most
    ``per_batch`` records (an option string) per batch; the source keeps its own log in
    the query's ``checkpoint``."""
    return (
        spark.readStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("checkpointLocation", checkpoint)
        .option("maxOffsetsPerTrigger", per_batch)
        .load()
    )


def write_kafka_topic(
    spark: SparkSession,
    frame: DataFrame,
    bootstrap: str,
    topic: str,
    checkpoint: str,
    *,
    guarantee: str,
    mode: str,
    options: Mapping[str, str] | None = None,
) -> None:
    """Write ``frame`` to ``topic`` through the ``firesteel.kafka`` sink with ``guarantee``
    and ``exactly.once.mode`` ``mode``, via :func:`run_available`.

    ``options`` are further sink options.
    """
    writer = (
        frame.writeStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("guarantee", guarantee)
        .option("exactly.once.mode", mode)
        .options(**(options or {}))
    )
    run_available(spark, writer, checkpoint)


def run_available(spark: SparkSession, writer: DataStreamWriter, checkpoint: str) -> None:
    """Run ``writer`` over everything available from the fixed ``checkpoint``, then stop.

    Returns when the query has processed all input (Trigger.AvailableNow) and
    ``spark`` is stopped; a failed query raises, so the job exits non-zero. In a
    group of jobs sharing a driver (:mod:`firesteel.testing.together`) it only starts
    the query, named after the job's part, and the group waits.
    """
    if start_in_group(writer, checkpoint):
        return
    query = writer.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    query.awaitTermination()
    spark.stop()


def write_files_exactly_once(
    spark: SparkSession, frame: DataFrame, out: str, checkpoint: str
) -> None:
    """Write ``frame`` as Parquet to ``out`` through the transactional ``firesteel.files``
    sink with ``guarantee=exactly-once``, via :func:`run_available`."""
    writer = (
        frame.writeStream.format("firesteel.files")
        .option("path", out)
        .option("format", "parquet")
        .option("guarantee", "exactly-once")
    )
    run_available(spark, writer, checkpoint)
