"""The worker's pool of transactional clients: one task at a time, least recently used out."""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import Producer

from firesteel.kafka.pool import TransactionalClient, TransactionalPool
from firesteel.kafka.producing import DeliveryTracker, tracked_config
from firesteel.testing.kafka import free_port


@dataclass
class _Consumer:
    closed: bool = False

    def close(self) -> None:
        self.closed = True


class _Producer:
    def poll(self, _timeout: float) -> int:
        return 0


def _client() -> TransactionalClient:
    return TransactionalClient(_Producer(), DeliveryTracker({}), _Consumer())


def test_a_client_is_lent_to_one_task_at_a_time():
    pool = TransactionalPool()
    client = _client()
    pool.give(("id-0",), client)
    assert pool.take(("id-0",)) is client
    assert pool.take(("id-0",)) is None
    assert pool.take(("id-1",)) is None


def test_the_least_recently_given_client_is_closed_beyond_capacity():
    pool = TransactionalPool(capacity=2)
    clients = [_client() for _ in range(3)]
    for index, client in enumerate(clients):
        pool.give((f"id-{index}",), client)
    assert clients[0].marker_consumer.closed and clients[0].producer is None
    assert pool.take(("id-0",)) is None
    assert pool.take(("id-2",)) is clients[2] and not clients[2].marker_consumer.closed


def test_a_fenced_client_is_closed_not_lent_and_a_task_starts_clean():
    pool = TransactionalPool()
    fenced, failing = _client(), _client()
    fenced.tracker.fenced = True
    pool.give(("fenced",), fenced)
    assert pool.take(("fenced",)) is None and fenced.marker_consumer.closed
    failing.tracker.failed = 3
    failing.tracker.failures.append("an earlier task's delivery error")
    pool.give(("failing",), failing)
    lent = pool.take(("failing",))
    assert lent is failing and lent.tracker.failed == 0 and not lent.tracker.failures


def test_giving_a_second_client_for_one_id_closes_the_first():
    pool = TransactionalPool()
    first, second = _client(), _client()
    pool.give(("id",), first)
    pool.give(("id",), second)
    assert first.marker_consumer.closed
    assert pool.take(("id",)) is second


def test_a_client_whose_brokers_went_away_while_idle_is_closed_not_lent():
    """Its error callback, run by the pool's poll, reports the lost brokers: librdkafka
    was seen to block forever in such a producer's next transactional call."""
    config = {"bootstrap.servers": f"127.0.0.1:{free_port()}", "log_level": 0}
    tracker = DeliveryTracker(config)
    client = TransactionalClient(Producer(tracked_config(config, tracker)), tracker, _Consumer())
    time.sleep(2.0)  # its connection attempts fail; the errors wait for a poll
    assert tracker.down is None
    pool = TransactionalPool()
    pool.give(("id",), client)
    assert pool.take(("id",)) is None
    assert client.marker_consumer.closed and client.producer is None
