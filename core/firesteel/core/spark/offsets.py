"""What a source's entry in Spark's offsets log says about its replay capability.

Each source of a query writes one JSON line per batch into
``<checkpoint>/offsets/N``. firesteel sources tag theirs (see
:mod:`firesteel.core.spark.reader`); two of Spark's own sources are recognised
by the form of their entry, because their replay is known:

- the built-in file sources (``parquet``, ``json``, ``csv``, ``orc``, ``text``)
  write ``{"logOffset": n}``, an index into the source's own metadata log
  (``<checkpoint>/sources/<i>/<n>``) that lists the files of each batch, so a
  re-run of batch N reads exactly the same files;
- the JVM Kafka source (``spark-sql-kafka``) writes
  ``{"topic": {"partition": offset, ...}, ...}`` and re-reads that offset range.

Everything else (``rate``, ``socket``, ``memory``: a bare number; any unknown
form) counts as not resettable, because nothing says a re-run would see the
same records. A custom source whose entry happens to have the Kafka form is
taken for Kafka: tag it (``{"firesteel": {"source": ..., "replay": ...}}``)
to say otherwise. :func:`source_parts` reads the latest entry of a query's log.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pyarrow import fs

from firesteel.core.errors import CheckpointCorruptError
from firesteel.core.guarantee import Part, Replay
from firesteel.core.storage import resolve

SOURCE_TAG = "firesteel"
"""Key under which a firesteel source's offset carries its identity and replay capability."""


@dataclass(frozen=True)
class SourceEntry:
    """What one offsets-log line identifies."""

    description: str
    replay: Replay


def _is_spark_file_source(offset: Any) -> bool:
    return (
        isinstance(offset, dict)
        and set(offset) == {"logOffset"}
        and isinstance(offset["logOffset"], int)
    )


def _is_spark_kafka_source(offset: Any) -> bool:
    if not isinstance(offset, dict) or not offset:
        return False
    for partitions in offset.values():
        if not isinstance(partitions, dict) or not partitions:
            return False
        for partition, position in partitions.items():
            if not partition.isdigit() or not isinstance(position, int):
                return False
    return True


def _shown(line: str) -> str:
    return line if len(line) <= 60 else line[:57] + "..."


def classify(line: str) -> SourceEntry:
    """The source behind one offsets-log line, and whether it can replay a batch."""
    offset: Any = None
    if line.strip() not in ("", "-"):
        try:
            offset = json.loads(line)
        except json.JSONDecodeError:
            offset = None
    tag = offset.get(SOURCE_TAG) if isinstance(offset, dict) else None
    if isinstance(tag, dict) and "source" in tag:
        return SourceEntry(str(tag["source"]), Replay(tag["replay"]))
    if _is_spark_file_source(offset):
        return SourceEntry(
            "Spark's file source; replays its batches from its own metadata log",
            Replay.RESETTABLE,
        )
    if _is_spark_kafka_source(offset):
        topics = ", ".join(sorted(offset))
        return SourceEntry(
            f"Spark's Kafka source on {topics}; re-reads its offset ranges", Replay.RESETTABLE
        )
    return SourceEntry(
        f"not a source firesteel knows, offset {_shown(line)}; its replay capability is unknown",
        Replay.NOT_RESETTABLE,
    )


def _latest_offsets_file(fsys: fs.FileSystem, base: str) -> str | None:
    infos = fsys.get_file_info(fs.FileSelector(f"{base}/offsets", allow_not_found=True))
    batches = [int(info.base_name) for info in infos if info.base_name.isdigit()]
    return f"{base}/offsets/{max(batches)}" if batches else None


def source_parts(checkpoint: str) -> list[Part]:
    """The sources feeding the query checkpointed at ``checkpoint``, for the guarantee check.

    Each offsets line is classified by :func:`classify`:
    firesteel's tagged sources, Spark's own file and Kafka sources, and
    everything else as not resettable.
    """
    location = resolve(checkpoint)
    fsys = location.filesystem
    path = _latest_offsets_file(fsys, location.path)
    if path is None:
        return []
    with fsys.open_input_stream(path) as stream:
        lines = stream.read().decode("utf-8").splitlines()
    if len(lines) < 2 or not lines[0].startswith("v"):
        msg = f"{path}: not a Spark offsets log entry (expected a version line and metadata)"
        raise CheckpointCorruptError(msg)
    parts = []
    for index, line in enumerate(lines[2:]):
        entry = classify(line)
        parts.append(Part(f"source #{index} ({entry.description})", replay=entry.replay))
    return parts
