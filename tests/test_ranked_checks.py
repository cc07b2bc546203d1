"""The ranking job's checkers fail on the faults they exist to catch."""

from __future__ import annotations

import pyarrow as pa
import pytest

from firesteel.testing.ranked import RankedRun, misranked, ranks_by_key


def key_of(seq: int) -> str:
    return f"k{seq % 2}"


def output(rows: list[tuple[int, str, int]]) -> pa.Table:
    seq, key, rank = zip(*rows, strict=True)
    return pa.table({"seq": list(seq), "key": list(key), "rank": list(rank)})


# Two batches of seqs 0-3; each key's timer fired once, after batch 0 (seq -1).
GOOD = [(0, "k0", 1), (1, "k1", 1), (2, "k0", 2), (3, "k1", 2), (-1, "k0", 0), (-1, "k1", 0)]


def test_a_run_without_faults_passes() -> None:
    RankedRun(range(4), key_of, batches=2).assert_output(output(GOOD))


@pytest.mark.parametrize(
    ("rows", "error"),
    [
        ([r for r in GOOD if r[0] != 3], "lost"),
        ([*GOOD, (3, "k1", 2)], "duplicated"),
        ([*GOOD[:2], (2, "k0", 3), *GOOD[3:]], "1 records ranked out of their key's order"),
        ([*GOOD, (-1, "k1", 0)], "a timer fired twice"),
        (GOOD[:-1], "did not fire once in each batch but the last"),
    ],
    ids=["lost", "duplicated", "update applied twice", "timer twice", "timer missing"],
)
def test_each_fault_is_caught(rows: list[tuple[int, str, int]], error: str) -> None:
    with pytest.raises(AssertionError, match=error):
        RankedRun(range(4), key_of, batches=2).assert_output(output(rows))


def test_misranked_counts_per_key_in_seq_order() -> None:
    table = output([(2, "k0", 2), (0, "k0", 1), (1, "k1", 2), (3, "k1", 1)])
    assert misranked(ranks_by_key(table)) == 2
