"""The names the exactly-once sink gives its transactions and commit markers.

Every name is derived from (prefix, sink id, key) alone, the key being the
Spark partition (``exactly.once.mode=in-task``) or the segment's number in the
batch's plan (``write-ahead``), never from the attempt or the batch, so a
retried or re-run send of the same key reuses them: the same transactional id
fences the earlier attempt, and the same marker group holds the marker the
re-run must find.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TransactionNames:
    """Names of one exactly-once sink: ``<prefix>-<sink id>-...`` per Spark partition."""

    prefix: str
    """Option ``transactional.id.prefix``."""
    sink_id: str

    def transactional_id(self, partition: int) -> str:
        """Stable per (sink, Spark partition): the same id fences earlier attempts."""
        return f"{self.prefix}-{self.sink_id}-{partition}"

    def marker_group(self, partition: int) -> str:
        """The consumer group whose committed offset is partition ``partition``'s marker."""
        return f"{self.prefix}-{self.sink_id}-marker-{partition}"
