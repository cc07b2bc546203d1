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
from collections.abc import Callable, Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from firesteel.testing.counting import assert_exactly_once
from firesteel.testing.harness import CrashResult
from firesteel.testing.spellings import Spellings

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


def assert_ranked_output(
    committed: pa.Table,
    expected: Iterable[int],
    key_of: Callable[[int], str],
    batches: int,
    context: str = "",
) -> None:
    """Every expected seq once, ranked by its position among its key's records, and every
    key's timer fired once in each batch but the last (each key has records in every batch)."""
    expected = list(expected)
    records = committed.filter(pc.greater_equal(committed.column("seq"), 0))
    assert_exactly_once(records.column("seq"), expected, what="output" + context)
    fired: dict[str, list[int]] = {}
    for row in committed.filter(pc.less(committed.column("seq"), 0)).to_pylist():
        fired.setdefault(row["key"], []).append(-row["seq"])
    assert {k: len(set(v)) for k, v in fired.items()} == {
        key_of(s): batches - 1 for s in expected
    }, f"a key's timer did not fire once in each batch but the last{context}"
    assert all(len(v) == len(set(v)) for v in fired.values()), f"a timer fired twice{context}"
    wrong = misranked(ranks_by_key(records))
    assert wrong == 0, f"{wrong} records ranked out of their key's order{context}"


def assert_ranked_state(
    state: pa.Table,
    expected: Iterable[int],
    key_of: Callable[[int], str],
    batches: int,
    context: str = "",
) -> None:
    """The state the job left (:func:`firesteel.backends.inspect.read_state`'s table): at the
    last batch, one pending timer and the total ``count`` of every key."""
    totals = Counter(key_of(s) for s in expected)
    frame = state.to_pandas()
    assert set(frame["batch"]) == {batches - 1}, context
    timers = frame[frame["kind"] == "timer"]
    assert sorted(timers["key"].str.strip('[]"')) == sorted(totals), f"one timer per key{context}"
    counts = frame[frame["state"] == "count"]
    stored = {
        key.strip('[]"'): int(value)
        for key, value in zip(counts["key"], counts["value"], strict=True)
    }
    assert stored == dict(totals), context


FILES = 60
ROWS_PER_FILE = 25
FILES_PER_BATCH = 3
BATCHES = FILES // FILES_PER_BATCH
KEYS = 7
PARALLELISM = (2, 3, 1, 4, 2, 1, 3, 4, 2)
"""The operator's parallelism in each run: every restart rescales the keyed state."""


def key_of(seq: int) -> str:
    """The key of record ``seq``: every key has records in every batch."""
    return f"k{(seq * 5) % KEYS}"


class RankedJob:
    """A crash test's ranking job under ``root``: its Parquet input (``FILES`` files of
    ``ROWS_PER_FILE`` consecutive seqs, ``FILES_PER_BATCH`` a batch), where it writes, and
    the checks of what it left.

    Each restart spells the checkpoint and state location otherwise and runs the operator at
    another parallelism (a user's rescale).
    """

    def __init__(self, root: Path) -> None:
        self.source = root / "in"
        self.out = root / "out"
        self.checkpoint = root / "ck"
        self.state = root / "state"
        self.checkpoints = Spellings(self.checkpoint)
        self.states = Spellings(self.state)
        self.source.mkdir(parents=True)
        for index in range(FILES):
            seqs = list(range(index * ROWS_PER_FILE, (index + 1) * ROWS_PER_FILE))
            table = pa.table({"seq": pa.array(seqs, pa.int64()), "key": [key_of(s) for s in seqs]})
            pq.write_table(table, self.source / f"part-{index:04d}.parquet")
        self.expected = range(FILES * ROWS_PER_FILE)

    def args(self, run: int) -> list[str]:
        """Run ``run``'s arguments: source, output, checkpoint, state, then
        :meth:`backend_args`, files a batch and parallelism."""
        return [
            str(self.source),
            str(self.out),
            self.checkpoints(run),
            self.states(run),
            *self.backend_args(),
            str(FILES_PER_BATCH),
            str(PARALLELISM[run % len(PARALLELISM)]),
        ]

    def backend_args(self) -> list[str]:
        """Arguments of the job's state backend (none for the filesystem backend)."""
        return []

    def check(self, result: CrashResult) -> None:
        """Every record once and ranked, every timer fired, the state's totals right."""
        from firesteel.backends.inspect import read_state
        from firesteel.files import read_committed

        context = f"\n{result.summary()}"
        committed = read_committed(str(self.out))
        assert_ranked_output(committed, self.expected, key_of, BATCHES, context)
        state = read_state(f"file://{self.state}", operator="rank")
        assert_ranked_state(state, self.expected, key_of, BATCHES, context)
