"""Test scheduling and shared servers for the whole suite (every folder of ``testpaths``).

``make test`` runs the suite in two pytest-xdist workers that take one test at
a time (``--maxschedchunk 1``). The crash tests and the other tests marked
``slow`` or ``soak`` take minutes each and the rest seconds, so the slow ones
are handed out first: both workers then finish at about the same time instead of one
starting a seven-minute kill loop while the other has nothing left to do.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from firesteel.testing.workerpython import use_worker_python

pytest_plugins = ["firesteel.testing.fixtures"]
"""The shared fixtures of every folder: ``spark`` (one session per test process), the
crash harness, the standalone cluster, the S3 server and the storage emulators."""

# Spark starts its Python processes with PYSPARK_PYTHON / PYSPARK_DRIVER_PYTHON: this
# interpreter (it has firesteel installed), through a wrapper that keeps PySpark's zip
# copies off their path (firesteel.testing.workerpython).
use_worker_python()

SLOW = ("crash", "slow", "soak")
"""Markers of the tests handed out first."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move tests marked ``crash``, ``slow`` or ``soak`` to the front, keeping their order."""
    items.sort(key=lambda item: not any(m.name in SLOW for m in item.iter_markers()))


@pytest.fixture(scope="session")
def bootstrap() -> Iterator[str]:
    """``host:port`` of the Kafka broker every test of this worker talks to.

    Started once per worker, on first use, and stopped by PID: a real Apache
    Kafka broker from ``KAFKA_HOME`` when set, else tansu (memory storage); the
    cluster named by ``FIRESTEEL_KAFKA_BOOTSTRAP`` wins over both. Defined here,
    not per folder, so the connector's and the pipelines' tests share one broker.
    """
    from firesteel.testing.kafka import kafka_cluster

    with kafka_cluster() as address:
        yield address
