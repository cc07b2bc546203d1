"""How many bad records a source's tasks skipped or quarantined, one record per range read.

A task that skipped or quarantined records writes ``errors/<range>.json`` in its
source's folder; a replay of the range writes the same name again and replaces
it, so the sum that query progress shows never counts a record twice. The Kafka
source keeps these in its :class:`~firesteel.sources.folder.SourceFolder`, the
file source in its discovered-file log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from firesteel.core.toolkit import ERRORS_DIR, Folder, bad_record_counts


@dataclass(frozen=True)
class BadRecordCounts:
    """The bad-record records of one source. Picklable: tasks write them."""

    folder: Folder
    """The source's folder; the records live under its ``errors/``."""
    kind: str
    """The records' kind (their envelope's name), e.g. ``kafka-source-errors``."""
    version: int
    """The records' format version, written and the only one read."""

    def record(
        self,
        offset_range: str,
        skipped: int,
        quarantined: int,
        examples: Sequence[str] | None = None,
    ) -> None:
        """Record the bad records of one range (in its task; replaces a replay's record).

        ``examples`` describe a few of the bad records, for whoever opens the record.
        """
        content: dict[str, object] = {"skipped": skipped, "quarantined": quarantined}
        if examples is not None:
            content["examples"] = list(examples)
        self.folder.write_record(
            f"{ERRORS_DIR}/{offset_range}.json", self.kind, self.version, content
        )

    def total(self) -> dict[str, int]:
        """Bad records skipped and quarantined so far, summed over every range read."""
        return bad_record_counts(self.folder, self.kind, (self.version,))
