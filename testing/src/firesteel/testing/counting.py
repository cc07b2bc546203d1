"""Counting sequence-numbered records: did the output get every input exactly once?

Crash tests feed a job records numbered ``0 .. n-1`` (or any set of distinct
integers) and compare the numbers found in the output with the input::

    count = assert_exactly_once(table.column("seq"), range(n), what="files sink")

Each assertion returns the :class:`SequenceCount` so a test can also report it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeAlias, Union

import pyarrow as pa

Numbers: TypeAlias = Union[Iterable[int], pa.Array, pa.ChunkedArray]  # noqa: UP007
"""Sequence numbers as Python ints or an Arrow integer column."""

_SHOWN = 20


def _as_list(values: Numbers) -> list[int]:
    if isinstance(values, pa.Array | pa.ChunkedArray):
        if values.null_count:
            msg = f"sequence column has {values.null_count} nulls; every record needs a number"
            raise ValueError(msg)
        return [int(v) for v in values.to_pylist()]
    return [int(v) for v in values]


@dataclass(frozen=True)
class SequenceCount:
    """The comparison of output sequence numbers with the input's."""

    expected: int
    """Distinct sequence numbers in the input."""
    seen: int
    """Records in the output."""
    lost: list[int]
    """Input numbers missing from the output (sorted)."""
    duplicated: dict[int, int]
    """Output numbers seen more than once -> how many times."""
    unexpected: list[int]
    """Output numbers that are not in the input (sorted)."""

    @property
    def exactly_once(self) -> bool:
        """Nothing lost, nothing duplicated, nothing invented."""
        return not (self.lost or self.duplicated or self.unexpected)

    @property
    def at_least_once(self) -> bool:
        """Nothing lost and nothing invented; duplicates allowed."""
        return not (self.lost or self.unexpected)

    def describe(self) -> str:
        """A one-paragraph report that shows the first offending numbers."""

        def show(items: Sequence[object]) -> str:
            head = ", ".join(map(str, items[:_SHOWN]))
            return head + (f", ... ({len(items)} in all)" if len(items) > _SHOWN else "")

        dups = [f"{seq}x{times}" for seq, times in sorted(self.duplicated.items())]
        return (
            f"expected {self.expected} records, saw {self.seen}; "
            f"lost {len(self.lost)} [{show(self.lost)}]; "
            f"duplicated {len(self.duplicated)} [{show(dups)}]; "
            f"unexpected {len(self.unexpected)} [{show(self.unexpected)}]"
        )


def count_sequence(actual: Numbers, expected: Numbers) -> SequenceCount:
    """Compare the sequence numbers found in the output with those fed in."""
    wanted = set(_as_list(expected))
    counts = Counter(_as_list(actual))
    return SequenceCount(
        expected=len(wanted),
        seen=sum(counts.values()),
        lost=sorted(wanted - counts.keys()),
        duplicated={seq: times for seq, times in counts.items() if times > 1},
        unexpected=sorted(counts.keys() - wanted),
    )


def _checked(
    actual: Numbers, expected: Numbers, holds: Callable[[SequenceCount], bool], failure: str
) -> SequenceCount:
    """The count, after raising AssertionError (``failure`` and the count) unless it ``holds``."""
    count = count_sequence(actual, expected)
    if not holds(count):
        msg = f"{failure}: {count.describe()}"
        raise AssertionError(msg)
    return count


def assert_exactly_once(actual: Numbers, expected: Numbers, what: str = "output") -> SequenceCount:
    """Fail unless every expected number appears exactly once in ``actual``."""
    return _checked(
        actual, expected, lambda count: count.exactly_once, f"{what} is not exactly-once"
    )


def assert_at_least_once(actual: Numbers, expected: Numbers, what: str = "output") -> SequenceCount:
    """Fail if an expected number is missing from ``actual`` (duplicates are allowed)."""
    return _checked(actual, expected, lambda count: count.at_least_once, f"{what} lost records")
