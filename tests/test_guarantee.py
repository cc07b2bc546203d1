"""Table 8-1 as code: every cell, and the refusal messages."""

from __future__ import annotations

import pytest

from firesteel.core.errors import ConfigError, GuaranteeError
from firesteel.core.guarantee import Guarantee, Part, Replay, SinkKind, check, end_to_end

TABLE_8_1 = {
    (Replay.NOT_RESETTABLE, SinkKind.PLAIN): Guarantee.AT_MOST_ONCE,
    (Replay.NOT_RESETTABLE, SinkKind.IDEMPOTENT): Guarantee.AT_MOST_ONCE,
    (Replay.NOT_RESETTABLE, SinkKind.WRITE_AHEAD_LOG): Guarantee.AT_MOST_ONCE,
    (Replay.NOT_RESETTABLE, SinkKind.WRITE_AHEAD_LOG_UPSERT): Guarantee.AT_MOST_ONCE,
    (Replay.NOT_RESETTABLE, SinkKind.TWO_PHASE_COMMIT): Guarantee.AT_MOST_ONCE,
    (Replay.RESETTABLE, SinkKind.PLAIN): Guarantee.AT_LEAST_ONCE,
    (Replay.RESETTABLE, SinkKind.IDEMPOTENT): Guarantee.EXACTLY_ONCE,
    (Replay.RESETTABLE, SinkKind.WRITE_AHEAD_LOG): Guarantee.AT_LEAST_ONCE,
    (Replay.RESETTABLE, SinkKind.WRITE_AHEAD_LOG_UPSERT): Guarantee.EXACTLY_ONCE,
    (Replay.RESETTABLE, SinkKind.TWO_PHASE_COMMIT): Guarantee.EXACTLY_ONCE,
}


@pytest.mark.parametrize(("cell", "expected"), TABLE_8_1.items())
def test_every_cell_of_table_8_1(cell: tuple[Replay, SinkKind], expected: Guarantee) -> None:
    assert end_to_end(*cell) is expected


def test_table_covers_every_combination() -> None:
    assert set(TABLE_8_1) == {(r, k) for r in Replay for k in SinkKind}


def test_weakest_source_decides() -> None:
    sources = [
        Part("source #0 (files)", replay=Replay.RESETTABLE),
        Part("source #1 (socket)", replay=Replay.NOT_RESETTABLE),
    ]
    sink = Part("sink files", sink_kind=SinkKind.TWO_PHASE_COMMIT)
    assert check(sources, sink, None) is Guarantee.AT_MOST_ONCE
    with pytest.raises(GuaranteeError, match=r"source #1 \(socket\) cannot replay"):
        check(sources, sink, Guarantee.AT_LEAST_ONCE)


def test_sink_that_falls_short_is_named() -> None:
    sources = [Part("source #0 (kafka)", replay=Replay.RESETTABLE)]
    sink = Part("sink kafka", sink_kind=SinkKind.PLAIN)
    assert check(sources, sink, Guarantee.AT_LEAST_ONCE) is Guarantee.AT_LEAST_ONCE
    with pytest.raises(GuaranteeError, match="sink kafka is a plain sink") as info:
        check(sources, sink, Guarantee.EXACTLY_ONCE)
    assert "asks for exactly-once but its parts deliver at-least-once" in str(info.value)


def test_no_visible_source_is_refused() -> None:
    with pytest.raises(GuaranteeError, match="no source"):
        check([], Part("sink files", sink_kind=SinkKind.TWO_PHASE_COMMIT), None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("exactly-once", Guarantee.EXACTLY_ONCE),
        ("AT_LEAST_ONCE", Guarantee.AT_LEAST_ONCE),
        (" at-most-once ", Guarantee.AT_MOST_ONCE),
        ("none", Guarantee.AT_MOST_ONCE),
    ],
)
def test_parse(text: str, expected: Guarantee) -> None:
    assert Guarantee.parse(text) is expected


def test_parse_rejects_unknown_with_valid_values() -> None:
    valid = "valid values: at-most-once, at-least-once, exactly-once"
    with pytest.raises(ConfigError, match=valid):
        Guarantee.parse("exactly-twice")
