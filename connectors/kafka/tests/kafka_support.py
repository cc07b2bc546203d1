"""Shared test helpers (a plain module: ``conftest`` is ambiguous beside the root suite's)."""

from __future__ import annotations

from firesteel.testing.kafka import read_committed


def partition_by_last_digit(key: bytes | None, partitions: int) -> int:
    """A custom partitioner for the sink tests: the key's last digit modulo the partition count."""
    return int((key or b"0")[-1:].decode()) % partitions


def check_with_read_committed(bootstrap: str, topic: str, view) -> None:
    """A plain read_committed consumer must see exactly the raw-log view."""
    seen = read_committed(bootstrap, topic)
    assert [(r.partition, r.offset, r.value) for r in seen] == [
        (r.partition, r.offset, r.value) for r in view.committed
    ], "read_committed and the raw-log checker disagree"
