"""Shared test helpers (a plain module: ``conftest`` is ambiguous beside the root suite's)."""

from __future__ import annotations

import os

import pytest

from firesteel.kafka.testing import BOOTSTRAP_ENV

ON_REAL_KAFKA = bool(os.environ.get(BOOTSTRAP_ENV))
needs_real_kafka = pytest.mark.skipif(
    not ON_REAL_KAFKA,
    reason=f"needs a broker feature the local tansu broker lacks; set {BOOTSTRAP_ENV}",
)


def partition_by_last_digit(key: bytes | None, partitions: int) -> int:
    """A custom partitioner for the sink tests: the key's last digit modulo the partition count."""
    return int((key or b"0")[-1:].decode()) % partitions
