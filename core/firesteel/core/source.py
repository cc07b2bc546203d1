"""The resettable-source role of the checkpoint-commit protocol."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa

from firesteel.core.guarantee import Replay

Offset = dict[str, Any]
"""A source position: a small JSON-able dict that Spark stores in ``offsets/N``."""


@dataclass(frozen=True)
class ReadLimit:
    """Admission control for one micro-batch; ``None`` means unbounded."""

    max_records: int | None = None
    max_bytes: int | None = None
    max_files: int | None = None

    @property
    def unbounded(self) -> bool:
        """True when nothing caps the batch."""
        return self.max_records is None and self.max_bytes is None and self.max_files is None


UNBOUNDED = ReadLimit()


class ResettableSource(ABC):
    """A source that can re-read any offset range it handed out before.

    Call order, per micro-batch N (driver side unless noted):

    1. :meth:`latest_offset` with the end of batch N-1 (or :meth:`initial_offset`);
       Spark stores the answer in ``offsets/N`` before any task runs.
    2. :meth:`partitions` splits ``[start, end)``; it must be deterministic, so a
       re-run of N after a crash plans the same partitions.
    3. :meth:`read` (executors) yields the records of one partition; the same
       partition always yields the same records.
    4. :meth:`commit` after ``commits/N`` is durable: the source may now forget
       or archive everything up to ``end``. It is never asked for data before
       ``end`` again, but it may be called again with the same ``end`` after a
       crash, so it must be idempotent.

    Off-by-one trap: offsets are exclusive ends. ``latest_offset`` returns the
    position *after* the last record of the batch, and the next batch starts there.
    """

    replay: ClassVar[Replay] = Replay.RESETTABLE
    """What the guarantee check assumes; a source that cannot replay says NOT_RESETTABLE."""

    name: ClassVar[str] = "source"
    """The format name users know it by, e.g. ``firesteel.files``."""

    @abstractmethod
    def schema(self) -> pa.Schema:
        """The Arrow schema of every record batch :meth:`read` yields."""

    @abstractmethod
    def initial_offset(self) -> Offset:
        """Where a query without a checkpoint starts."""

    @abstractmethod
    def latest_offset(self, start: Offset, limit: ReadLimit) -> Offset:
        """The end of the next batch: at most ``limit`` beyond ``start``; ``start`` if no data."""

    @abstractmethod
    def partitions(self, start: Offset, end: Offset) -> Sequence[Any]:
        """Picklable, deterministic descriptions of the work in ``[start, end)``."""

    @abstractmethod
    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        """Yield the records of one partition (runs on an executor)."""

    def default_limit(self) -> ReadLimit:
        """The admission control configured through options."""
        return UNBOUNDED

    def prepare_available_now(self) -> None:
        """Fix the end of input for ``Trigger.AvailableNow``: later offsets stop there."""

    def report_latest_offset(self) -> Offset | None:
        """What query progress shows as this source's ``latestOffset`` (``None``: nothing).

        Called by Spark when it builds progress; it may carry counters the
        source wants users to see (e.g. skipped bad records), never positions
        that planning depends on.
        """
        return None

    def commit(self, end: Offset) -> None:
        """Checkpoint complete up to ``end`` (idempotent)."""

    def stop(self) -> None:
        """Release driver-side resources when the query ends."""
