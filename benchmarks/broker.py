"""The Kafka broker of the benchmark groups that need one.

The cluster ``FIRESTEEL_KAFKA_BOOTSTRAP`` names, else an Apache Kafka broker started
from ``KAFKA_HOME``, the ``shared`` folder beside this checkout, the cache, or the
release downloaded once (:mod:`firesteel.testing.kafka.distribution`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path


def kafka_broker() -> AbstractContextManager[str]:
    """A context yielding the bootstrap address; it stops the broker it started."""
    from firesteel.testing.kafka import kafka_cluster
    from firesteel.testing.kafka.distribution import beside_checkout

    return kafka_cluster(search=[beside_checkout(Path(__file__).resolve().parent.parent)])
