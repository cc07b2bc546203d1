"""Shared fixtures: one local SparkSession for the whole test session."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

# The crash-test harness fixtures: crash_harness, spark_cluster, cluster_harness.
pytest_plugins = ["firesteel.testing.fixtures"]

# Spark starts Python workers with PYSPARK_PYTHON; they must be this interpreter,
# which has firesteel and its dependencies installed.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A ``local[2]`` session with few shuffle partitions and firesteel registered."""
    from firesteel.core.spark.session import local_session

    session = local_session(
        "firesteel-tests",
        config={"spark.sql.streaming.forceDeleteTempCheckpointLocation": "true"},
    )
    yield session
    session.stop()
