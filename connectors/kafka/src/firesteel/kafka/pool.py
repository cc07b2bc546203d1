"""Kafka clients kept between the tasks of one Python worker.

Spark reuses its Python workers between tasks (``spark.python.worker.reuse``,
on by default), so a client made by one task can serve the next. That matters
most for exactly-once: a new transactional producer costs 60-140 ms on a
local broker before its first record (librdkafka's connections, then
``init_transactions``, itself about 7 ms) and its marker consumer a group
coordinator lookup (35-60 ms), per task and per batch, against about 2 ms for
a producer kept from the task before.

* :class:`SharedProducers`: plain producers, shared by every task of the
  worker that has the same configuration.
* :class:`TransactionalPool`: a transactional producer and its marker consumer
  per transactional id, lent to one task at a time and given back only when
  the task's transaction ended cleanly, and not lent again once it lost its
  brokers while idle. At most :data:`IDLE_PER_WORKER` wait
  in a worker; the least recently used is closed first.

A kept transactional producer may have been fenced since its last task (the
same Spark partition ran in another worker, whose ``init_transactions`` bumped
the epoch). The sink finds out before it produces anything and then starts
over with a new producer: see :mod:`firesteel.kafka.sink`. Spark picks any
idle worker for a task, so how often a kept producer is the right one depends
on the job: measured with 4 partitions on ``local[2]``, about a quarter of
the tasks after a query's first batch.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from firesteel.kafka.producing import DeliveryTracker, tracked_config

IDLE_PER_WORKER = 16
"""Transactional clients a Python worker keeps between tasks (each holds broker connections)."""


def config_key(config: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """A hashable form of a client configuration."""
    return tuple(sorted((k, str(v)) for k, v in config.items()))


class SharedProducers:
    """Non-transactional producers reused between tasks of one Python worker."""

    def __init__(self) -> None:
        self.entries: dict[tuple[tuple[str, str], ...], tuple[Any, DeliveryTracker]] = {}

    def get(self, config: dict[str, Any]) -> tuple[Any, DeliveryTracker]:
        """The worker's producer for ``config``, new if there is none or it failed fatally."""
        from confluent_kafka import Producer

        key = config_key(config)
        entry = self.entries.get(key)
        if entry is None or entry[1].fatal is not None:
            tracker = DeliveryTracker(config)
            entry = (Producer(tracked_config(config, tracker)), tracker)
            self.entries[key] = entry
        entry[1].reset()
        return entry


@dataclass
class TransactionalClient:
    """A transactional producer (``init_transactions`` done) and its marker consumer."""

    producer: Any
    tracker: DeliveryTracker
    marker_consumer: Any
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    """Names this producer instance in the markers it commits: a kept producer whose
    partition's marker names another was fenced by that one, and is not tried."""
    marker: tuple[str, int] | None = None
    """(query id, last committed batch) of its id's marker as this instance last saw or set
    it (a read, or its own committed transaction); ``None`` after anything else."""

    def close(self) -> None:
        """Close the consumer; the producer is only dropped (it has nothing in flight)."""
        self.marker_consumer.close()
        self.producer = None


class TransactionalPool:
    """Idle transactional clients by (transactional id, configuration), one task at a time."""

    def __init__(self, capacity: int = IDLE_PER_WORKER) -> None:
        self.capacity = capacity
        self.idle: OrderedDict[tuple[Any, ...], TransactionalClient] = OrderedDict()

    def take(self, key: tuple[Any, ...]) -> TransactionalClient | None:
        """Remove and return the idle client for ``key``, if any is still usable.

        One that lost its brokers while it waited (an outage, a restart: its error
        callback says so once polled) is closed instead: librdkafka was seen to block
        forever in such a producer's next ``send_offsets_to_transaction``, whatever
        its timeout. A new producer's ``init_transactions`` fences it.
        """
        client = self.idle.pop(key, None)
        if client is not None:
            client.producer.poll(0)
        if client is not None and (client.tracker.unusable or client.tracker.down is not None):
            client.close()
            return None
        if client is not None:
            client.tracker.reset()
        return client

    def give(self, key: tuple[Any, ...], client: TransactionalClient) -> None:
        """Keep ``client`` (its transaction ended cleanly) for the next task with ``key``."""
        old = self.idle.pop(key, None)
        if old is not None:
            old.close()
        self.idle[key] = client
        while len(self.idle) > self.capacity:
            _, evicted = self.idle.popitem(last=False)
            evicted.close()
