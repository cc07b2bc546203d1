"""Self-describing JSON records on a local filesystem: atomic, versioned, checksummed.

The file source's discovered-file log and the file sink's manifests are such
records. A record is written to a temporary name, fsynced, and renamed into
place (then the folder is fsynced), so a reader sees the whole record or none.
Its body carries a format version and the SHA-256 of its content; a reader
refuses a record whose checksum does not match or whose version it does not know.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

from firesteel.core.errors import CheckpointCorruptError, IncompatibleFormatError


def _digest(content: Any) -> str:
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def fsync_dir(folder: Path) -> None:
    """Make renames and creations inside ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _encode(kind: str, version: int, content: Any) -> bytes:
    body = {"kind": kind, "version": version, "content": content, "sha256": _digest(content)}
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def _write_tmp(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    with tmp.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    return tmp


def write_record(path: Path, kind: str, version: int, content: Any) -> None:
    """Atomically write (or replace) the record at ``path``."""
    tmp = _write_tmp(path, _encode(kind, version, content))
    os.replace(tmp, path)
    fsync_dir(path.parent)


def create_record(path: Path, kind: str, version: int, content: Any) -> bool:
    """Atomically create the record at ``path`` unless one exists; False if it did.

    Uses a hard link, which fails when the target exists, so two writers racing
    for the same name cannot both win.
    """
    tmp = _write_tmp(path, _encode(kind, version, content))
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink()
    fsync_dir(path.parent)
    return True


def read_record(path: Path, kind: str, versions: tuple[int, ...]) -> Any:
    """The content of the record at ``path``, checked; raises if corrupt or unknown."""
    try:
        body = json.loads(path.read_bytes())
    except json.JSONDecodeError as exc:
        msg = f"{path}: not a valid firesteel {kind} record ({exc}); it was damaged"
        raise CheckpointCorruptError(msg) from exc
    if not isinstance(body, dict) or body.get("kind") != kind:
        msg = f"{path}: not a firesteel {kind} record"
        raise CheckpointCorruptError(msg)
    if body.get("version") not in versions:
        msg = (
            f"{path}: {kind} format version {body.get('version')} is not one this release "
            f"reads ({', '.join(map(str, versions))}); upgrade firesteel"
        )
        raise IncompatibleFormatError(msg)
    content = body.get("content")
    if body.get("sha256") != _digest(content):
        msg = f"{path}: {kind} record checksum mismatch; the file was damaged or edited"
        raise CheckpointCorruptError(msg)
    return content
