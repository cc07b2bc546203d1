"""Fixtures of the template connector's tests: one local SparkSession."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from firesteel.testing.workerpython import use_worker_python

# Spark starts its Python processes with PYSPARK_PYTHON / PYSPARK_DRIVER_PYTHON: this
# interpreter (it has firesteel installed), through a wrapper that keeps PySpark's zip
# copies off their path (firesteel.testing.workerpython).
use_worker_python()


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A ``local[2]`` session with every installed connector registered."""
    from firesteel.core import local_session

    session = local_session("firesteel-template-tests")
    yield session
    session.stop()
