"""Helpers for the job scripts the crash-test harness runs.

A job script is an ordinary program (``python job.py <args>``) that:

1. builds its session with :func:`job_session`, which reads the master the
   harness chose (``local[2,4]`` or a standalone cluster) and forwards the
   fault-injection environment to executors;
2. processes all available input from a *fixed* checkpoint location
   (``.trigger(availableNow=True)`` then ``awaitTermination()``, or
   ``processAllAvailable()`` then ``stop()``);
3. exits 0 when done. Any other exit is a failure the harness reports, except
   the SIGKILLs it caused itself.

Example::

    from firesteel.testing.jobs import job_session

    spark = job_session("files-job")
    query = (spark.readStream.format("firesteel.files").option("format", "parquet")
             .load(src).writeStream.format("firesteel.files")
             .option("path", out).option("checkpointLocation", ck)
             .trigger(availableNow=True).start())
    query.awaitTermination()
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MASTER_ENV = "FIRESTEEL_SPARK_MASTER"
"""The Spark master the harness asks the job to use."""

DEFAULT_MASTER = "local[2,4]"
"""Two cores, up to four attempts per task, so an injected task failure is retried."""

QUICK_START_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""JVM flags for short test jobs: C1 only and a serial GC start faster on a busy machine,
which matters when a crash test restarts the job a dozen times."""

FORWARDED_PREFIXES = ("FIRESTEEL_",)
"""Environment variables forwarded to executors on a cluster (the fault hook reads them)."""


def job_session(app_name: str, shuffle_partitions: int = 2) -> SparkSession:
    """The SparkSession for a harness job, with every firesteel connector registered.

    On a standalone cluster, executors are separate JVMs started by the
    workers: they get ``PYSPARK_PYTHON`` (this interpreter) and every
    ``FIRESTEEL_*`` variable through ``spark.executorEnv.*``, so fault points
    fire on executors too and the harness can recognise executor processes.
    """
    from pyspark.sql import SparkSession

    from firesteel.core import register

    master = os.environ.get(MASTER_ENV, DEFAULT_MASTER)
    python = os.environ.get("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executorEnv.PYSPARK_PYTHON", python)
        .config("spark.driver.extraJavaOptions", QUICK_START_JVM)
        .config("spark.executor.extraJavaOptions", QUICK_START_JVM)
    )
    if master.startswith("spark://"):
        builder = (
            builder.config("spark.executor.memory", "512m")
            .config("spark.executor.cores", "1")
            .config("spark.cores.max", "2")
            .config("spark.task.maxFailures", "4")
        )
        for key, value in os.environ.items():
            if key.startswith(FORWARDED_PREFIXES):
                builder = builder.config(f"spark.executorEnv.{key}", value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark
