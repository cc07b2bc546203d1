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

from firesteel.core.durable import decode_record, encode_record, write_atomically
from firesteel.core.errors import CheckpointCorruptError, CheckpointNotFoundError
from firesteel.core.guarantee import Guarantee
from firesteel.core.storage import StorageConfig, canonical, resolve

logger = logging.getLogger(__name__)

FIRESTEEL_DIR = "firesteel"
"""Sub-folder of a Spark checkpoint holding firesteel's own records."""


def filesystem(uri: str, config: StorageConfig | None = None) -> tuple[fs.FileSystem, str]:
    """A pyarrow filesystem and path for a location (see :mod:`firesteel.core.storage`)."""
    location = resolve(uri, config)
    return location.filesystem, location.path


def normalize_location(location: str) -> str:
    """One spelling per checkpoint: ``/chk``, ``/chk/``, ``file:/chk`` and ``file:///chk``
    (and a symlink to it) give the same string, as do ``s3a://b/chk`` and ``s3://b/chk``."""
    return canonical(location)


def read_query_id(checkpoint: str) -> str | None:
    """Spark's query id from ``<checkpoint>/metadata``, or None before Spark wrote it.

    Spark writes the file when the query starts, before it builds any sink, and
    keeps it across restarts; a deleted and recreated checkpoint gets a new id.
    """
    fsys, base = filesystem(checkpoint)
    try:
        with fsys.open_input_stream(f"{base}/metadata") as stream:
            first = stream.read().decode("utf-8").splitlines()[0]
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
        fsys, base = filesystem(checkpoint)
        found = fsys.get_file_info(fs.FileSelector(f"{base}/commits", allow_not_found=True))
    except OSError:
        return False
    return any(info.base_name.isdigit() for info in found)


def query_identity(checkpoint: str) -> str:
    """What durable work of the query checkpointed at ``checkpoint`` is keyed by.

    Spark's query id (:func:`read_query_id`), which a deleted and recreated
    checkpoint does not keep; the checkpoint's one spelling
    (:func:`normalize_location`) only before Spark wrote its metadata, which it
    does before it builds any source or sink of a streaming query.
    """
    query_id = read_query_id(checkpoint) if checkpoint else None
    return query_id or normalize_location(checkpoint)


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
    fsys, base = filesystem(checkpoint)
    body = {
        "sink": record.sink,
        "sources": record.sources,
        "achieved": record.achieved.label,
        "required": record.required.label if record.required is not None else None,
    }
    path = f"{base}/{FIRESTEEL_DIR}/guarantee-{sink_id}.json"
    content = encode_record(GUARANTEE_KIND, GUARANTEE_VERSION, body)
    # Spark rebuilds the sink's driver half for every batch: rewrite (and fsync)
    # only when the record changes, so the per-batch cost stays one small read.
    try:
        with fsys.open_input_stream(path) as stream:
            if stream.read() == content:
                return
    except FileNotFoundError:
        pass
    fsys.create_dir(f"{base}/{FIRESTEEL_DIR}", recursive=True)
    write_atomically(fsys, path, content)


def read_guarantee(checkpoint: str) -> dict[str, Any]:
    """The guarantee records of every firesteel sink of a query, keyed by sink id.

    Empty for a query that has no firesteel sink or has not planned a batch yet.
    :class:`~firesteel.core.errors.CheckpointNotFoundError` when ``checkpoint`` holds
    neither Spark's query metadata nor firesteel's records: a mistyped location, or one
    this process cannot see (a Spark Connect client reading a path of the server's).
    """
    fsys, base = filesystem(checkpoint)
    found = fsys.get_file_info([f"{base}/metadata", f"{base}/{FIRESTEEL_DIR}"])
    if all(info.type == fs.FileType.NotFound for info in found):
        msg = (
            f"{checkpoint} holds no Spark checkpoint (no metadata file, no {FIRESTEEL_DIR}/ "
            "records) seen from this process; over Spark Connect, read it where the "
            "server's paths are"
        )
        raise CheckpointNotFoundError(msg)
    infos = fsys.get_file_info(fs.FileSelector(f"{base}/{FIRESTEEL_DIR}", allow_not_found=True))
    records = {}
    for info in infos:
        name = info.base_name
        if name.startswith("guarantee-") and name.endswith(".json"):
            with fsys.open_input_stream(info.path) as stream:
                data = stream.read()
            where = f"{checkpoint}/{FIRESTEEL_DIR}/{name}"
            records[name[len("guarantee-") : -len(".json")]] = decode_record(
                data, where, GUARANTEE_KIND, (GUARANTEE_VERSION,)
            )
    return records
