"""The interval-join example runs on the suite's session (a real query of two keyed streams)
and commits what its guide page says it does. The sessionizer and the timeout detector are
left out of the suite for the time they would cost: their operators run as real queries in
``test_crash_windows.py`` (session windows) and ``test_state_event_time.py`` (the timeout
detector's processor)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from firesteel.examples import interval_join


def test_the_interval_join_joins_clicks_with_recent_impressions(spark: Any, tmp_path: Path) -> None:
    found = interval_join.run(tmp_path, spark)
    assert sorted((r["ad"], r["shown_to"], r["clicked_by"]) for r in found) == [
        ("a1", "ann", "ann"),
        ("a1", "cid", "cid"),
    ]
