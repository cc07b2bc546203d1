"""Building a SparkSession with firesteel registered, for tests, benchmarks, demos and jobs.

One builder so the settings every small session needs (few shuffle partitions,
no UI, the venv's Python for workers) are written once; callers add their own
settings through ``config``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOOPBACK: Mapping[str, str] = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}
"""Settings that keep the driver on 127.0.0.1 (machines whose hostname does not resolve,
or where only the loopback interface may be used)."""

WORKER_DAEMON: Mapping[str, str] = {"spark.python.daemon.module": "firesteel.core.spark.daemon"}
"""The session setting that makes Spark fork its Python workers from firesteel's worker
daemon (:mod:`firesteel.core.spark.daemon`)."""

LOCAL_PROFILE: Mapping[str, str] = {
    "spark.driver.memory": "512m",
    "spark.driver.extraJavaOptions": (
        "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=64m "
        "-XX:MaxMetaspaceSize=256m -Xss512k -Xms64m"
    ),
    "spark.python.worker.reuse": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "2000",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.streaming.numRecentProgressUpdates": "20",
    "spark.ui.enabled": "false",
    **WORKER_DAEMON,
}
"""The ``local`` memory profile: one machine, a small job, the JVM kept small.

Give it as ``config`` to :func:`local_session`, or set it on any builder before the
first session of the process (the JVM's heap and flags are fixed when it starts).
Why each: a 512 MB heap is plenty for a ``local[2]`` driver whose data lives in Python
workers and Kafka; the serial collector and C1-only JIT keep the JVM's own memory
(GC structures, code cache) small and start it faster, at some cost in peak
throughput; reused Python workers are started once; 2,000-row Arrow batches bound
what each worker holds at once; two shuffle partitions match two cores; workers
fork from firesteel's worker daemon (:mod:`firesteel.core.spark.daemon`), which
imported pyarrow, pandas, PySpark's worker and firesteel before forking. Measured
(issue 36, Kafka -> Kafka exactly-once): a peak of 1.60 GB PSS for the whole
process tree against 1.67 GB with a 2 GB driver, at the same throughput; most of
it is Spark's Python processes, which no setting here removes. The heap starts at 64 MB
and grows as the job needs, up to the same 512 MB: the JVM otherwise commits 1/64 of the
machine's memory at start and cycles the young generation through all of it (a 116 MB
young generation on a 24 GB machine, where this job's driver keeps about 50 MB live).
Measured with ``python -m benchmarks.memory`` (Kafka -> Kafka exactly-once, 1M x 100 B,
1 s triggers): the JVM's PSS 337 MB instead of 411-413, the whole tree's peak 1,104 MB
instead of 1,184-1,248 MB.
"""


def local_session(
    app_name: str,
    *,
    master: str = "local[2]",
    shuffle_partitions: int = 2,
    log_level: str = "ERROR",
    config: Mapping[str, str] | None = None,
) -> SparkSession:
    """The SparkSession of this process (``getOrCreate``), with every firesteel connector
    registered as ``firesteel.<name>``.

    Sets ``spark.sql.shuffle.partitions`` and disables the UI, then applies
    ``config`` in order (it may override both). Python workers default to this
    interpreter: ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` are set when unset,
    since Spark starts workers with them and they must have firesteel installed.

    Trap: when a session already exists, ``getOrCreate`` returns it and static
    settings (master, memory) given here are ignored.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from firesteel.core import register

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
    )
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    register(spark)
    return spark
