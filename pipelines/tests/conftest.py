"""The pipeline tests share the suite's SparkSession fixture."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from firesteel.testing.workerpython import use_worker_python

use_worker_python()


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A ``local[2]`` session with firesteel registered."""
    from firesteel.core.spark.session import local_session

    session = local_session("firesteel-pipeline-tests")
    yield session
    session.stop()
