"""Every fault point the Cassandra soak command arms is one the library declares."""

from __future__ import annotations

from firesteel.cassandra.wal import MID_SEND
from firesteel.testing.cassandra.soak import POINTS
from firesteel.testing.points import registered


def test_the_cassandra_point_is_declared_and_found_through_the_entry_points() -> None:
    assert registered()[MID_SEND.name] is MID_SEND


def test_every_point_the_soak_arms_is_declared() -> None:
    armed = {point for points in POINTS.values() for point in points}
    assert armed <= set(registered()), armed - set(registered())
