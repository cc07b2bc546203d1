"""What a source knew when it last planned a batch, read from beside the checkpoint.

A source that keeps a folder in its query's checkpoint
(:class:`firesteel.sources.spi.SourceFolder`) replaces ``progress.json`` there each time
Spark plans a batch (the Kafka source: the committed positions, the log ends and the lag
between them); :func:`read_source_progress` finds every such record of a query.
"""

from __future__ import annotations

from typing import Any

from pyarrow import fs

from firesteel.core import layout
from firesteel.core.folder import Folder

__all__ = ["PROGRESS", "progress_kind", "read_source_progress"]

PROGRESS = "progress.json"
"""The progress record's name in a source's folder."""
VERSIONS = (1,)


def progress_kind(source: str) -> str:
    """The record kind of source ``source``'s progress (``kafka-source-progress``)."""
    return f"{source}-source-progress"


def read_source_progress(checkpoint: str) -> dict[str, dict[str, Any]]:
    """The progress record of every source of a query that keeps one, by its folder's name
    (``kafka-source-<digest of the subscription>``)."""
    records = Folder(layout.records(checkpoint))
    found = {}
    for info in records.entries():
        name = info.base_name
        source = layout.source_connector(name)
        if info.type != fs.FileType.Directory or source is None:
            continue
        try:
            found[name] = records.read_record(f"{name}/{PROGRESS}", progress_kind(source), VERSIONS)
        except FileNotFoundError:
            continue
    return found
