"""The retry window every outage loop keeps time with: doubling waits, cut to the deadline."""

from __future__ import annotations

import time

import pytest

from firesteel.core.toolkit import RetryWindow


def test_waits_double_from_the_first_up_to_the_longest() -> None:
    window = RetryWindow(timeout_s=100.0, first_wait_s=0.2, max_wait_s=1.0)
    assert [window.next_wait() for _ in range(5)] == pytest.approx([0.2, 0.4, 0.8, 1.0, 1.0])


def test_the_window_opens_at_the_first_wait_and_its_last_wait_ends_with_it() -> None:
    window = RetryWindow(timeout_s=0.5)
    assert not window.ongoing
    assert not window.expired
    assert window.left == 0.5
    window.open(at=time.monotonic() - 0.45)
    began = window.began
    assert window.ongoing
    assert 0 < window.next_wait() <= 0.05 + 1e-6
    window.open(at=time.monotonic() - 10)  # an open window keeps its start
    assert window.began == began
    time.sleep(0.06)
    assert window.expired
    assert window.next_wait() == 0.0


def test_progress_closes_the_window_and_the_next_failure_starts_short_again() -> None:
    window = RetryWindow(timeout_s=0.2, first_wait_s=0.1, max_wait_s=5.0)
    window.open(at=time.monotonic() - 1)
    assert window.expired
    window.close()
    assert not window.ongoing
    assert not window.expired
    assert window.next_wait() == pytest.approx(0.1)
    assert window.ongoing
