"""Shared test helpers (a plain module: ``conftest`` is ambiguous beside the root suite's)."""

from __future__ import annotations

import pytest

from firesteel.kafka.testing import KAFKA_HOME_ENV, broker_kind

ON_REAL_KAFKA = broker_kind() == "kafka"
needs_real_kafka = pytest.mark.skipif(
    not ON_REAL_KAFKA,
    reason=f"tansu 0.6 lacks this Kafka feature; set {KAFKA_HOME_ENV} to an Apache Kafka 3.x "
    "distribution to run it",
)


def partition_by_last_digit(key: bytes | None, partitions: int) -> int:
    """A custom partitioner for the sink tests: the key's last digit modulo the partition count."""
    return int((key or b"0")[-1:].decode()) % partitions
