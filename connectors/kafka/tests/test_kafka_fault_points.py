"""Every fault point the Kafka crash tests and soak command arm is one the library declares."""

from __future__ import annotations

from pathlib import Path

from test_kafka_crash import together_kills

from firesteel.kafka.sink.points import AFTER_FLUSH, AFTER_PRODUCE
from firesteel.kafka.source import AFTER_INITIAL_OFFSET
from firesteel.testing.kafka.soak import POINTS
from firesteel.testing.points import registered


def test_the_kafka_points_are_declared_and_found_through_the_entry_points() -> None:
    known = registered()
    for point in (AFTER_PRODUCE, AFTER_FLUSH, AFTER_INITIAL_OFFSET):
        assert known[point.name] is point


def test_every_point_the_crash_tests_and_soak_arm_is_declared(tmp_path: Path) -> None:
    armed = {
        spec.split("@")[0].split("#")[0]
        for kill in together_kills(tmp_path)
        for spec in getattr(kill, "specs", ())
    }
    armed.update(point for points in POINTS.values() for point in points)
    assert armed <= set(registered()), armed - set(registered())
