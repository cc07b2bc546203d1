"""What a source knew when it last planned a batch, read from beside the checkpoint.

A source that keeps a folder in its query's checkpoint
(:class:`firesteel.sources.spi.SourceFolder`) replaces ``progress.json`` there each time
Spark plans a batch (the Kafka source: the committed positions, the log ends and the lag
between them); :func:`read_source_progress` finds every such record of a query.
"""

from __future__ import annotations

from typing import Any

from pyarrow import fs

from firesteel.core.checkpoint import FIRESTEEL_DIR, filesystem
from firesteel.core.durable import decode_record

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
    fsys, base = filesystem(checkpoint)
    found = {}
    selector = fs.FileSelector(f"{base}/{FIRESTEEL_DIR}", allow_not_found=True)
    for info in fsys.get_file_info(selector):
        name = info.base_name
        if info.type != fs.FileType.Directory or "-source-" not in name:
            continue
        path = f"{info.path}/{PROGRESS}"
        try:
            with fsys.open_input_stream(path) as stream:
                data = stream.read()
        except FileNotFoundError:
            continue
        found[name] = decode_record(data, path, progress_kind(name.split("-source-")[0]), VERSIONS)
    return found
