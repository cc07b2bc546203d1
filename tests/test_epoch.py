"""Epoch counts from datetimes and numbers (timers in ms, Cassandra write times in us)."""

from __future__ import annotations

import datetime as dt

from firesteel.core.toolkit import MICROS, MILLIS, to_epoch

STAMP = dt.datetime(2024, 3, 1, 12, 0, 0, 123456)
EPOCH_S = 1709294400


def test_a_naive_datetime_means_utc() -> None:
    assert to_epoch(STAMP, MILLIS) == EPOCH_S * 1000 + 123
    assert to_epoch(STAMP, MICROS) == EPOCH_S * 1_000_000 + 123456
    assert to_epoch(STAMP, MILLIS) == to_epoch(STAMP.replace(tzinfo=dt.timezone.utc), MILLIS)


def test_an_aware_datetime_keeps_its_offset() -> None:
    plus_two = dt.timezone(dt.timedelta(hours=2))
    assert to_epoch(STAMP.replace(tzinfo=plus_two), MILLIS) == (EPOCH_S - 7200) * 1000 + 123


def test_a_number_is_already_in_the_unit() -> None:
    assert to_epoch(1_500, MILLIS) == 1_500
    assert to_epoch(1_500.9, MICROS) == 1_500
