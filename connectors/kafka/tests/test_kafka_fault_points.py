"""Every fault point the Kafka crash tests and soak command arm is one the library declares."""

from __future__ import annotations

from test_kafka_crash import EXACTLY_ONCE_POINTS, EXACTLY_ONCE_TASK_POINTS

from firesteel.kafka.sink.points import AFTER_FLUSH, AFTER_PRODUCE
from firesteel.kafka.source import AFTER_INITIAL_OFFSET
from firesteel.testing.kafka.soak import POINTS
from firesteel.testing.points import registered


def test_the_kafka_points_are_declared_and_found_through_the_entry_points() -> None:
    known = registered()
    for point in (AFTER_PRODUCE, AFTER_FLUSH, AFTER_INITIAL_OFFSET):
        assert known[point.name] is point


def test_every_point_the_crash_tests_and_soak_arm_is_declared() -> None:
    armed = {*EXACTLY_ONCE_POINTS, *EXACTLY_ONCE_TASK_POINTS}
    armed.update(point for points in POINTS.values() for point in points)
    assert armed <= set(registered()), armed - set(registered())
