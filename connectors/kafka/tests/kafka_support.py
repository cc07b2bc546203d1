"""Shared test helpers (a plain module: ``conftest`` is ambiguous beside the root suite's)."""

from __future__ import annotations

import pytest

from firesteel.testing.kafka import KAFKA_HOME_ENV, broker_kind, read_committed

ON_REAL_KAFKA = broker_kind() == "kafka"
needs_real_kafka = pytest.mark.skipif(
    not ON_REAL_KAFKA,
    reason=f"tansu 0.6 lacks this Kafka feature; set {KAFKA_HOME_ENV} to an Apache Kafka 3.x "
    "distribution to run it",
)


def partition_by_last_digit(key: bytes | None, partitions: int) -> int:
    """A custom partitioner for the sink tests: the key's last digit modulo the partition count."""
    return int((key or b"0")[-1:].decode()) % partitions


def check_with_read_committed(bootstrap: str, topic: str, view) -> None:
    """On Apache Kafka a plain read_committed consumer must see exactly the raw-log view."""
    if not ON_REAL_KAFKA:
        return
    seen = read_committed(bootstrap, topic)
    assert [(r.partition, r.offset, r.value) for r in seen] == [
        (r.partition, r.offset, r.value) for r in view.committed
    ], "read_committed and the raw-log checker disagree"
