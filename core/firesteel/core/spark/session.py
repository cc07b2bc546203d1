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
