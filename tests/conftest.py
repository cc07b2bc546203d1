"""Shared fixtures: one local SparkSession for the whole test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from firesteel.testing.workerpython import use_worker_python

# The crash-test harness fixtures: crash_harness, spark_cluster, cluster_harness.
pytest_plugins = ["firesteel.testing.fixtures"]

# Spark starts its Python processes with PYSPARK_PYTHON / PYSPARK_DRIVER_PYTHON: this
# interpreter (it has firesteel installed), through a wrapper that keeps PySpark's zip
# copies off their path (firesteel.testing.workerpython).
use_worker_python()


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
