"""The event-time examples run on the suite's session and commit what their guide page says
they do: the sessionizer and the interval join. (The timeout detector is the processor
``test_state_event_time.py`` runs as a real query; its example is left out of the suite for
the time it would cost.)"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from firesteel.examples import interval_join, sessionizer
from firesteel.examples.eventtime import EPOCH


def at(seconds: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(EPOCH + seconds, dt.timezone.utc)


def test_the_sessionizer_re_emits_a_session_a_late_click_joined(spark: Any, tmp_path: Path) -> None:
    found, late = sessionizer.run(tmp_path, spark)
    sessions = sorted((r["user"], r["window_start"], r["window_end"], r["clicks"]) for r in found)
    assert sessions == [
        ("ann", at(0), at(900), 2),
        ("ann", at(0), at(900), 3),
        ("bob", at(60), at(660), 1),
        ("bob", at(1_000), at(1_600), 1),
    ]
    assert [(r["user"], r["page"]) for r in late] == [("bob", "back")]


def test_the_interval_join_joins_clicks_with_recent_impressions(spark: Any, tmp_path: Path) -> None:
    found = interval_join.run(tmp_path, spark)
    assert sorted((r["ad"], r["shown_to"], r["clicked_by"]) for r in found) == [
        ("a1", "ann", "ann"),
        ("a1", "cid", "cid"),
    ]
