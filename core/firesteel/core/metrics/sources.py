"""What a source knew when it last planned a batch, read from beside the checkpoint.

A source that keeps a folder in its query's checkpoint
(:class:`firesteel.sources.spi.SourceFolder`) replaces ``progress.json`` there each time
Spark plans a batch (the Kafka source: the committed positions, the log ends and the lag
between them), and a task that skipped or quarantined bad records keeps their counts there
(``errors/<range>.json``, one per range read: a replay replaces its range's record);
:func:`read_source_progress` finds every such record of a query, with the bad records
summed (:func:`bad_record_counts`).
"""

from __future__ import annotations

from typing import Any

from pyarrow import fs

from firesteel.core import layout
from firesteel.core.folder import Folder

__all__ = [
    "BAD_RECORDS",
    "ERRORS",
    "PROGRESS",
    "bad_record_counts",
    "errors_kind",
    "progress_kind",
    "read_source_progress",
]

PROGRESS = "progress.json"
"""The progress record's name in a source's folder."""
VERSIONS = (1,)
ERRORS = "errors"
"""The folder of a source's bad-record counts, one record per range read."""
ERRORS_VERSIONS = (1,)
BAD_RECORDS = "bad_records"
"""The key of the summed counts in a source's progress as read here."""


def progress_kind(source: str) -> str:
    """The record kind of source ``source``'s progress (``kafka-source-progress``)."""
    return f"{source}-source-progress"


def errors_kind(source: str) -> str:
    """The record kind of source ``source``'s bad-record counts (``kafka-source-errors``)."""
    return f"{source}-source-errors"


def bad_record_counts(folder: Folder, kind: str, versions: tuple[int, ...]) -> dict[str, int]:
    """Bad records ``skipped`` and ``quarantined`` so far, summed over the records of kind
    ``kind`` under ``folder``'s ``errors/`` (one per range read, however often read)."""
    total = {"skipped": 0, "quarantined": 0}
    for name in folder.names(ERRORS):
        if not name.endswith(".json"):
            continue
        counts = folder.read_record(f"{ERRORS}/{name}", kind, versions)
        for key in total:
            total[key] += int(counts[key])
    return total


def read_source_progress(checkpoint: str) -> dict[str, dict[str, Any]]:
    """The progress record of every source of a query that keeps one, by its folder's name
    (``kafka-source-<digest of the subscription>``), with its bad records under
    :data:`BAD_RECORDS`."""
    records = Folder(layout.records(checkpoint))
    found = {}
    for info in records.entries():
        name = info.base_name
        source = layout.source_connector(name)
        if info.type != fs.FileType.Directory or source is None:
            continue
        try:
            progress = records.read_record(f"{name}/{PROGRESS}", progress_kind(source), VERSIONS)
        except FileNotFoundError:
            continue
        counts = bad_record_counts(records.child(name), errors_kind(source), ERRORS_VERSIONS)
        found[name] = {**progress, BAD_RECORDS: counts}
    return found
