"""Key groups: the unit in which keyed state is partitioned, snapshotted and rescaled.

This is Flink's ``KeyGroupRangeAssignment``. A key belongs to one of
``max_parallelism`` key groups forever (the hash of its key columns modulo
``max_parallelism``); the operator's ``parallelism`` partitions each own a
contiguous range of key groups. Changing ``parallelism`` between restarts only
moves whole key groups between partitions, which is why rescaling keeps every
key's state. Changing ``max_parallelism`` would move keys between groups and is
refused.

The hash is Spark's own ``hash()`` (Murmur3, seed 42) over the key columns,
computed in the JVM before the shuffle, so the Python side never hashes keys.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from firesteel.core.spi import ConfigError

DEFAULT_MAX_PARALLELISM = 128
"""Number of key groups when the user does not choose: Flink's default lower bound."""

KEY_GROUP_COLUMN = "__firesteel_key_group"
"""The column of the operator's input that holds each record's key group."""

MAX_KEY_GROUPS = 32768
"""Upper bound of ``max_parallelism`` (Flink's, and the snapshot format's int16 column)."""


def validate(parallelism: int, max_parallelism: int) -> None:
    """Refuse a parallelism that cannot own at least one key group per partition."""
    if not 1 <= max_parallelism <= MAX_KEY_GROUPS:
        msg = f"max_parallelism must be in [1, {MAX_KEY_GROUPS}], got {max_parallelism}"
        raise ConfigError(msg)
    if not 1 <= parallelism <= max_parallelism:
        msg = (
            f"parallelism must be in [1, max_parallelism={max_parallelism}], got {parallelism}: "
            "each operator partition owns at least one key group"
        )
        raise ConfigError(msg)


def key_group_column(key_columns: Sequence[str], max_parallelism: int) -> Any:
    """The Spark column of each row's key group: ``pmod(hash(key columns), max_parallelism)``."""
    from pyspark.sql import functions as F

    return F.pmod(F.hash(*[F.col(c) for c in key_columns]), F.lit(max_parallelism))


def operator_index(key_group: int, parallelism: int, max_parallelism: int) -> int:
    """The operator partition that owns ``key_group`` (Flink's computeOperatorIndexForKeyGroup)."""
    return key_group * parallelism // max_parallelism


@dataclass(frozen=True)
class KeyGroupRange:
    """The inclusive range ``[start, end]`` of key groups one operator partition owns."""

    start: int
    end: int

    @classmethod
    def for_partition(cls, index: int, parallelism: int, max_parallelism: int) -> KeyGroupRange:
        """Flink's computeKeyGroupRangeForOperatorIndex: the inverse of :func:`operator_index`."""
        start = (index * max_parallelism + parallelism - 1) // parallelism
        end = ((index + 1) * max_parallelism - 1) // parallelism
        return cls(start, end)

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start <= key_group <= self.end

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end + 1))

    def __len__(self) -> int:
        return self.end - self.start + 1

    def overlaps(self, other: KeyGroupRange) -> bool:
        """Whether the two ranges share a key group."""
        return self.start <= other.end and other.start <= self.end

    @property
    def label(self) -> str:
        """``0000-0063``: how the range appears in snapshot file names."""
        return f"{self.start:04d}-{self.end:04d}"
