"""Checks of the ranking job's output, shared by the crash tests of every state backend.

The job ranks sequence-numbered records per key in keyed state (``count``),
registers a timer per key each batch, and writes ranked records (``seq`` >= 0)
and fired timers (``seq`` = -batch) through the transactional file sink. A
run with no lost or doubled state update leaves every record ranked by its
position among its key's records, and every key's timer fired once per batch
but the last.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from firesteel.testing.counting import assert_exactly_once

RankPairs = dict[str, list[tuple[int, int]]]
"""(seq, rank) pairs of each key."""


def ranks_by_key(records: pa.Table) -> RankPairs:
    """The (seq, rank) pairs of each key of ranked ``records`` (columns seq, key, rank)."""
    by_key: RankPairs = {}
    for row in records.select(["seq", "key", "rank"]).to_pylist():
        by_key.setdefault(row["key"], []).append((row["seq"], row["rank"]))
    return by_key


def misranked(pairs_by_key: RankPairs) -> int:
    """Records whose rank is not their position among their key's records."""
    wrong = 0
    for pairs in pairs_by_key.values():
        pairs.sort()
        wrong += sum(1 for index, (_, rank) in enumerate(pairs) if rank != index + 1)
    return wrong


@dataclass(frozen=True)
class RankedRun:
    """What a run of the ranking job was fed, to check what it left against: every
    ``expected`` seq, keyed by ``key_of``, in ``batches`` batches; ``context`` (the
    harness's summary) ends every failure message."""

    expected: Sequence[int]
    key_of: Callable[[int], str]
    batches: int
    context: str = ""

    def assert_output(self, committed: pa.Table) -> None:
        """Every expected seq once, ranked by its position among its key's records, and every
        key's timer fired once in each batch but the last (each key has records in every
        batch)."""
        context = self.context
        records = committed.filter(pc.greater_equal(committed.column("seq"), 0))
        assert_exactly_once(records.column("seq"), self.expected, what="output" + context)
        fired: dict[str, list[int]] = {}
        for row in committed.filter(pc.less(committed.column("seq"), 0)).to_pylist():
            fired.setdefault(row["key"], []).append(-row["seq"])
        assert {k: len(set(v)) for k, v in fired.items()} == {
            self.key_of(s): self.batches - 1 for s in self.expected
        }, f"a key's timer did not fire once in each batch but the last{context}"
        assert all(len(v) == len(set(v)) for v in fired.values()), f"a timer fired twice{context}"
        wrong = misranked(ranks_by_key(records))
        assert wrong == 0, f"{wrong} records ranked out of their key's order{context}"

    def assert_state(self, state: pa.Table) -> None:
        """The state the job left (:func:`firesteel.backends.inspect.read_state`'s table): at
        the last batch, one pending timer and the total ``count`` of every key."""
        context = self.context
        totals = Counter(self.key_of(s) for s in self.expected)
        frame = state.to_pandas()
        assert set(frame["batch"]) == {self.batches - 1}, context
        timers = frame[frame["kind"] == "timer"]
        assert sorted(timers["key"].str.strip('[]"')) == sorted(totals), (
            f"one timer per key{context}"
        )
        counts = frame[frame["state"] == "count"]
        stored = {
            key.strip('[]"'): int(value)
            for key, value in zip(counts["key"], counts["value"], strict=True)
        }
        assert stored == dict(totals), context
