"""pytest fixtures of the crash-test harness; enable with ``pytest_plugins``.

In a ``conftest.py``::

    pytest_plugins = ["firesteel.testing.fixtures"]

* ``spark``: the test process's shared ``local[2]`` session
  (:func:`~firesteel.testing.jobs.suite_session`), stopped at the end.
* ``crash_harness``: a :class:`~firesteel.testing.harness.CrashHarness` on
  ``local[2,4]`` in the test's ``tmp_path``; everything it started is killed at
  teardown, also when the test fails.
* ``spark_cluster``: a :class:`~firesteel.testing.cluster.StandaloneCluster`
  (master + two 1-core workers), started once per test session on first use and
  stopped by PID at the end.
* ``cluster_harness``: a harness whose jobs run on ``spark_cluster``.
* ``connect_server``: a Spark Connect server
  (:class:`~firesteel.testing.connect.ConnectServer`) started from the PySpark wheel,
  once per test session on first use, and stopped by PID at the end.
* ``s3_server``: an S3 API server process (:class:`~firesteel.testing.s3.S3Server`),
  started once per test session on first use and stopped by PID at the end.
* ``gcs_emulator`` and ``azurite``: the Google Cloud Storage and Azure Blob
  emulators (:mod:`firesteel.testing.emulators`), likewise; a test using
  ``azurite`` is skipped, saying how to install it, where npm was not there to
  install it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from firesteel.testing.cluster import StandaloneCluster
from firesteel.testing.connect import ConnectServer
from firesteel.testing.emulators import Azurite, EmulatorNotInstalledError, GcsEmulator
from firesteel.testing.harness import CrashHarness
from firesteel.testing.jobs import suite_session
from firesteel.testing.s3 import S3Server
from firesteel.testing.servers import ServerProcess


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The session every test of this process shares (:func:`suite_session`)."""
    session = suite_session("firesteel-tests")
    yield session
    session.stop()


@pytest.fixture
def crash_harness(tmp_path: Path) -> Iterator[CrashHarness]:
    """A crash harness on ``local[2,4]``, closed (every process killed) at teardown."""
    with CrashHarness(tmp_path / "harness") as harness:
        yield harness


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A local standalone cluster for the session; stopped by PID at the end."""
    with StandaloneCluster(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster


@pytest.fixture
def cluster_harness(spark_cluster: StandaloneCluster, tmp_path: Path) -> Iterator[CrashHarness]:
    """A crash harness whose jobs run on the standalone cluster."""
    with CrashHarness(tmp_path / "harness", master=spark_cluster.master_url) as harness:
        yield harness


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """A Spark Connect server for the session; stopped by PID at the end."""
    with ConnectServer(tmp_path_factory.mktemp("connect-server")) as server:
        yield server


Served = TypeVar("Served", bound=ServerProcess)


def _serving(server: Served) -> Iterator[Served]:
    """``server`` started for the fixture's scope, killed by PID at its end."""
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """An S3 API server for the session (moto's server mode); stopped by PID at the end."""
    yield from _serving(S3Server(tmp_path_factory.mktemp("s3-server")))


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsEmulator]:
    """A GCS emulator for the session; stopped by PID at the end."""
    yield from _serving(GcsEmulator(tmp_path_factory.mktemp("gcs-emulator")))


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """Azurite's Blob service for the session; stopped by PID at the end (skipped, saying
    how to install it, where it is not installed)."""
    try:
        yield from _serving(Azurite(tmp_path_factory.mktemp("azurite")))
    except EmulatorNotInstalledError as exc:
        pytest.skip(str(exc))
