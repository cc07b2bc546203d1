"""Test scheduling and shared servers for the whole suite (every folder of ``testpaths``).

``make test`` runs the suite in two pytest-xdist workers that take one test at
a time (``--maxschedchunk 1``). The crash tests and the other tests marked
``slow`` or ``soak`` take minutes each and the rest seconds, so the slow ones
are handed out first: both workers then finish at about the same time instead of one
starting a seven-minute kill loop while the other has nothing left to do.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from firesteel.testing.workerpython import use_worker_python

pytest_plugins = ["firesteel.testing.fixtures", "firesteel.testing.isolation"]
"""The shared fixtures of every folder: ``spark`` (one session per test process), the
crash harness, the standalone cluster, the S3 server and the storage emulators; and the
check that fails a test leaving what the next test shares changed (the environment, a
setting or the active session of the shared Spark session, a query running, ...)."""

# Spark starts its Python processes with PYSPARK_PYTHON / PYSPARK_DRIVER_PYTHON: this
# interpreter (it has firesteel installed), through a wrapper that keeps PySpark's zip
# copies off their path (firesteel.testing.workerpython).
use_worker_python()

SLOW = ("crash", "slow", "soak")
"""Markers of the tests handed out first."""


def pytest_configure(config: pytest.Config) -> None:
    """Settle which Apache Kafka the suite runs on, once, before any worker starts.

    ``KAFKA_HOME`` (else the sibling distribution, the cache or a checked download:
    :func:`~firesteel.testing.kafka.distribution.find_kafka`) is exported for the
    workers and every job they start. No distribution to be had stops the run at
    once, saying what to set. A cluster named by ``FIRESTEEL_KAFKA_BOOTSTRAP`` needs none.
    """
    from firesteel.testing.kafka import BOOTSTRAP_ENV, KAFKA_HOME_ENV, find_kafka
    from firesteel.testing.kafka.distribution import KafkaUnavailableError, beside_checkout

    if os.environ.get(BOOTSTRAP_ENV) or hasattr(config, "workerinput"):
        return
    try:
        distribution = find_kafka([beside_checkout(Path(__file__).parent)])
    except KafkaUnavailableError as e:
        raise pytest.UsageError(str(e)) from e
    os.environ[KAFKA_HOME_ENV] = str(distribution.home)
    config.stash[KAFKA_KEY] = distribution.describe()


KAFKA_KEY = pytest.StashKey[str]()


def pytest_report_header(config: pytest.Config) -> str:
    """Name the broker the suite's Kafka tests run on, first thing in the run's output."""
    from firesteel.testing.kafka import BOOTSTRAP_ENV

    existing = os.environ.get(BOOTSTRAP_ENV)
    if existing:
        return f"kafka: the cluster at {BOOTSTRAP_ENV}={existing}"
    return f"kafka: {config.stash.get(KAFKA_KEY, 'none')}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move tests marked ``crash``, ``slow`` or ``soak`` to the front, keeping their order."""
    items.sort(key=lambda item: not any(m.name in SLOW for m in item.iter_markers()))


@pytest.fixture(scope="session")
def bootstrap() -> Iterator[str]:
    """``host:port`` of the Kafka broker every test of this worker talks to.

    Started once per worker, on first use, and stopped by PID: an Apache Kafka
    broker from ``KAFKA_HOME`` (settled by :func:`pytest_configure`); the cluster
    named by ``FIRESTEEL_KAFKA_BOOTSTRAP`` wins. Defined here,
    not per folder, so the connector's and the pipelines' tests share one broker.
    """
    from firesteel.testing.kafka import kafka_cluster

    with kafka_cluster() as address:
        yield address
