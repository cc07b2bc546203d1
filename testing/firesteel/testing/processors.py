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
