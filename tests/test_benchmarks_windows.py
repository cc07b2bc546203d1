"""The windows benchmark group's reference, which every side's output is checked against.

The group itself runs Spark queries over millions of events (``python -m benchmarks
windows``); it is left out of the suite's quick run, and its plain-Python reference is
tested here on a handful of events.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

ROOT = Path(__file__).resolve().parent.parent
BASE = 1_767_225_600_000
"""A minute boundary (2026-01-01T00:00Z)."""


def _events(rows: list[tuple[str, int]]) -> pa.Table:
    return pa.table(
        {
            "key": [key for key, _ in rows],
            "ts": pa.array([BASE + ms for _, ms in rows], pa.timestamp("ms", tz="UTC")),
        }
    )


def _windows(frame) -> list[tuple[str, int, int, int]]:
    return [
        (key, start - BASE, end - BASE, count)
        for key, start, end, count in frame.itertuples(index=False)
    ]


EVENTS = [("a", 1_000), ("a", 50_000), ("a", 61_000), ("b", 2_000), ("a", 200_000)]


def test_reference_keeps_the_tumbling_windows_the_watermark_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks.bench_windows import reference

    found = reference(_events(EVENTS), "tumbling", BASE + 120_000)
    assert _windows(found) == [("a", 0, 60_000, 2), ("a", 60_000, 120_000, 1), ("b", 0, 60_000, 1)]


def test_reference_sessions_split_at_the_gap_and_close_at_their_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks.bench_windows import reference

    found = reference(_events(EVENTS), "session", BASE + 100_000)
    # a's records 49 s apart start a new session; 11 s apart share one; b is its own key.
    assert _windows(found) == [
        ("a", 1_000, 31_000, 1),
        ("a", 50_000, 91_000, 2),
        ("b", 2_000, 32_000, 1),
    ]


def test_the_window_forms_probe_runs_both_forms_on_their_own_state(tmp_path: Path) -> None:
    from benchmarks import window_forms
    from firesteel.backends.inspect import read_state
    from firesteel.state.window_table import WINDOW_TABLE

    for columns, state in ((True, WINDOW_TABLE.name), (False, "windows")):
        line = window_forms.measure(300, 30, columns=columns, folder=tmp_path / str(columns))
        assert "batches of 30 keys" in line, line
        names = {r["state"] for r in read_state(str(tmp_path / str(columns))).to_pylist()}
        assert state in names, names
