"""Keyed processors whose output proves exactly-once state in crash tests."""

from __future__ import annotations

from typing import Any

from firesteel.state import KeyedProcessor, KeyState, ValueStateDescriptor


class RankPerKey(KeyedProcessor):
    """Numbers each key's records 1, 2, 3... in sequence order, counting in keyed state.

    After any number of crashes, the ranks of a key must be exactly 1..n: a lost
    state update repeats a rank, an update applied twice skips one. Reads the
    ``seq`` column; override :meth:`row` to shape the output.
    """

    count = ValueStateDescriptor("count", int)

    def row(self, seq: int, key: Any, rank: int) -> dict[str, Any]:
        """One output row (default: ``seq``, ``key``, ``rank`` columns)."""
        return {"seq": seq, "key": key, "rank": rank}

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        count = state.value(self.count)
        seen = count.value() or 0
        seqs = sorted(rows.column("seq").to_pylist())
        count.update(seen + len(seqs))
        return [self.row(seq, key[0], seen + index + 1) for index, seq in enumerate(seqs)]


class RankPerKeyWithTimers(RankPerKey):
    """:class:`RankPerKey` that also sets a timer 1 ms after every batch a key has records in.

    A fired timer emits ``seq = -timestamp`` and ``rank = 0``; each key's timer
    rows must then be one per batch it had records in (except the last batch,
    whose timers are still pending), with distinct timestamps: a timer fired
    twice, lost, or fired on another clock in a re-run shows.
    """

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        state.register_timer(state.processing_time_ms + 1)
        return super().process(key, rows, state)

    def on_timer(self, key: Any, timestamp_ms: int, state: KeyState) -> Any:
        return [{"seq": -timestamp_ms, "key": key[0], "rank": 0}]
