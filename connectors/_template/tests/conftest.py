"""Fixtures of the template connector's tests: one local SparkSession."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A ``local[2]`` session with every installed connector registered."""
    from firesteel.core.spark.session import local_session

    session = local_session("firesteel-template-tests")
    yield session
    session.stop()
