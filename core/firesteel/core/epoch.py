"""Epoch counts from the timestamps users and Arrow hand over: one rule for naive datetimes."""

from __future__ import annotations

import datetime as dt

MILLIS = 1000
"""``per_second`` of epoch milliseconds (timers, Kafka timestamps)."""
MICROS = 1_000_000
"""``per_second`` of epoch microseconds (Cassandra write times)."""


def to_epoch(timestamp: dt.datetime | int | float, per_second: int) -> int:
    """``timestamp`` as a count of ``1 / per_second`` seconds since the epoch.

    A datetime is converted (a naive one means UTC, as Spark's session time zone
    does not reach Python workers); a number is taken as already counted in that
    unit and truncated to an int. ``per_second`` is :data:`MILLIS` or :data:`MICROS`.
    """
    if isinstance(timestamp, dt.datetime):
        if timestamp.tzinfo is None:
            timestamp = timestamp.replace(tzinfo=dt.timezone.utc)
        return int(timestamp.timestamp() * per_second)
    return int(timestamp)
