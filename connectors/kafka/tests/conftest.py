"""Fixtures for the Kafka connector's producer pools (the broker, ``bootstrap``, and the
SparkSession, ``spark``, are the suite's, from the root ``conftest.py``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from firesteel.kafka.pool import TransactionalPool
from firesteel.kafka.sink import transactions

# Python workers import test helpers (e.g. a custom partitioner) from this folder.
_HERE = os.path.dirname(os.path.abspath(__file__))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_HERE, os.environ.get("PYTHONPATH", "")) if p
)


@pytest.fixture
def new_worker() -> Iterator[Callable[[], TransactionalPool]]:
    """Makes the test's code run as a new Python worker (its own kept producers); every
    producer kept by such a worker is closed after the test."""
    pools: list[TransactionalPool] = []

    def worker() -> TransactionalPool:
        pools.append(TransactionalPool())
        return pools[-1]

    yield worker
    for pool in pools:
        for client in pool.idle.values():
            client.close()


@pytest.fixture
def worker_pool(
    new_worker: Callable[[], TransactionalPool], monkeypatch: pytest.MonkeyPatch
) -> TransactionalPool:
    """The test starts as a fresh Python worker: no producer kept from another test (the
    sink tests use it for every test, ``pytestmark``)."""
    pool = new_worker()
    monkeypatch.setattr(transactions, "_TRANSACTIONAL", pool)
    return pool
