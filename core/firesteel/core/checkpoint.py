"""Reading Spark's checkpoint (its query metadata) and firesteel's own records beside it.

What the offsets log says about the sources feeding a query is read by
:mod:`firesteel.core.spark.offsets`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from pyarrow import fs

from firesteel.core import layout
from firesteel.core.durable import encode_record
from firesteel.core.errors import CheckpointCorruptError, CheckpointNotFoundError
from firesteel.core.folder import Folder
from firesteel.core.guarantee import Guarantee
from firesteel.core.storage import canonical

logger = logging.getLogger(__name__)


def read_query_id(checkpoint: str) -> str | None:
    """Spark's query id from ``<checkpoint>/metadata``, or None before Spark wrote it.

    Spark writes the file when the query starts, before it builds any sink, and
    keeps it across restarts; a deleted and recreated checkpoint gets a new id.
    """
    try:
        first = Folder(checkpoint).read("metadata").decode("utf-8").splitlines()[0]
    except (FileNotFoundError, IndexError):
        return None
    try:
        return str(json.loads(first)["id"])
    except (ValueError, KeyError, TypeError) as exc:
        msg = f"{checkpoint}/metadata: not Spark's query metadata ({first[:80]!r})"
        raise CheckpointCorruptError(msg) from exc


def has_committed(checkpoint: str | None) -> bool:
    """Whether the query of ``checkpoint`` has committed a batch (Spark's ``commits/N``), so
    its servers answered before: a first request in a new process may wait out an outage."""
    if not checkpoint:
        return False
    try:
        found = Folder(checkpoint).entries("commits")
    except OSError:
        return False
    return any(info.base_name.isdigit() for info in found)


def query_identity(checkpoint: str) -> str:
    """What durable work of the query checkpointed at ``checkpoint`` is keyed by.

    Spark's query id (:func:`read_query_id`), which a deleted and recreated
    checkpoint does not keep; the checkpoint's one spelling
    (:func:`~firesteel.core.storage.canonical`) only before Spark wrote its metadata, which it
    does before it builds any source or sink of a streaming query.
    """
    query_id = read_query_id(checkpoint) if checkpoint else None
    return query_id or canonical(checkpoint)


GUARANTEE_KIND = "guarantee"
GUARANTEE_VERSION = 1


@dataclass(frozen=True)
class GuaranteeRecord:
    """The guarantee a query runs with (``<checkpoint>/firesteel/guarantee-<sink>.json``)."""

    sink: str
    sources: list[str]
    achieved: Guarantee
    required: Guarantee | None


def write_guarantee(checkpoint: str, sink_id: str, record: GuaranteeRecord) -> None:
    """Record the guarantee so users (and :func:`read_guarantee`) can see it."""
    body = {
        "sink": record.sink,
        "sources": record.sources,
        "achieved": record.achieved.label,
        "required": record.required.label if record.required is not None else None,
    }
    folder = Folder(layout.records(checkpoint))
    name = layout.guarantee(checkpoint, sink_id).rpartition("/")[2]
    content = encode_record(GUARANTEE_KIND, GUARANTEE_VERSION, body)
    # Spark rebuilds the sink's driver half for every batch: rewrite (and fsync)
    # only when the record changes, so the per-batch cost stays one small read.
    try:
        if folder.read(name) == content:
            return
    except FileNotFoundError:
        pass
    folder.write(name, content)


def read_guarantee(checkpoint: str) -> dict[str, Any]:
    """The guarantee records of every firesteel sink of a query, keyed by sink id.

    Empty for a query that has no firesteel sink or has not planned a batch yet.
    :class:`~firesteel.core.errors.CheckpointNotFoundError` when ``checkpoint`` holds
    neither Spark's query metadata nor firesteel's records: a mistyped location, or one
    this process cannot see (a Spark Connect client reading a path of the server's).
    """
    query = Folder(checkpoint)
    found = [query.info("metadata"), query.info(layout.FIRESTEEL_DIR)]
    if all(info.type == fs.FileType.NotFound for info in found):
        msg = (
            f"{checkpoint} holds no Spark checkpoint (no metadata file, no {layout.FIRESTEEL_DIR}/ "
            "records) seen from this process; over Spark Connect, read it where the "
            "server's paths are"
        )
        raise CheckpointNotFoundError(msg)
    folder = query.child(layout.FIRESTEEL_DIR)
    records = {}
    for name in folder.names():
        sink = layout.guarantee_sink(name)
        if sink is not None:
            records[sink] = folder.read_record(name, GUARANTEE_KIND, (GUARANTEE_VERSION,))
    return records


SAVEPOINT_TAKEN_KIND = "firesteel-savepoint-taken"
SAVEPOINT_TAKEN_VERSION = 1


def write_savepoint_taken(checkpoint: str, note: dict[str, Any]) -> None:
    """Note a savepoint taken of the query's state (``id``, ``batch``, ``location``,
    ``operators``, ``taken_at``) under ``<checkpoint>/firesteel/savepoints/``."""
    Folder(layout.savepoints(checkpoint)).write_record(
        f"{note['id']}.json", SAVEPOINT_TAKEN_KIND, SAVEPOINT_TAKEN_VERSION, note
    )


def read_savepoints_taken(checkpoint: str) -> list[dict[str, Any]]:
    """The savepoints taken of a query's state with its checkpoint given (``create`` with
    ``checkpoint=``, ``firesteel savepoint create --checkpoint``, a stop with a savepoint),
    oldest first: ``id``, ``batch``, ``location``, ``operators``, ``taken_at``."""
    folder = Folder(layout.savepoints(checkpoint))
    notes = [
        folder.read_record(name, SAVEPOINT_TAKEN_KIND, (SAVEPOINT_TAKEN_VERSION,))
        for name in folder.names()
        if name.endswith(".json")
    ]
    return sorted(notes, key=lambda note: (note["taken_at"], note["id"]))
