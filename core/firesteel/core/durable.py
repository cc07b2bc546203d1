"""Durable writes: every file firesteel must find whole after a crash goes through here.

The durability policy, one for the whole project:

1. A file is written under a unique temporary name in its final folder
   (``.<name>.<random>.tmp``), never in place, so a reader sees the old file or
   the new one and a zombie writer can never damage another attempt's file.
2. On a local filesystem the file is fsynced before the rename and the folder
   after it, so neither a process kill nor a machine crash leaves an empty or
   half-written file under the final name (``sync=False`` skips both for
   development-only data such as the heap backend's snapshots).
3. It is then moved into place with the filesystem's atomic rename (local,
   HDFS). Object stores (S3, GCS) have no rename: the object is uploaded under
   its final name, since a put becomes visible whole or not at all.

On top of that, this module writes self-describing JSON records (the file
source's discovered-file log, the file sink's manifests): versioned and
checksummed, so a reader refuses a damaged record or a format it does not know.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyarrow import NativeFile, fs

from firesteel.core.errors import CheckpointCorruptError, IncompatibleFormatError

OBJECT_STORES = frozenset({"s3", "gcs", "abfs"})
"""pyarrow filesystem types whose uploads are atomic and which have no rename."""


def fsync_dir(folder: Path) -> None:
    """Make renames and creations inside ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_output(fsys: fs.FileSystem, path: str, *, sync: bool = True) -> Iterator[NativeFile]:
    """A stream whose content appears at ``path`` whole, when the block ends without error.

    Follows the module's durability policy. An error inside the block removes the
    temporary file and leaves ``path`` as it was (on an object store the upload
    is under the final name, so the caller must not depend on a failed write
    leaving an older object untouched there).
    """
    if fsys.type_name in OBJECT_STORES:
        with fsys.open_output_stream(path) as out:
            yield out
        return
    folder, _, name = path.rpartition("/")
    temporary = f"{folder}/.{name}.{uuid.uuid4().hex}.tmp"
    local = sync and fsys.type_name == "local"
    try:
        with fsys.open_output_stream(temporary) as out:
            yield out
        if local:
            _fsync_file(temporary)
        fsys.move(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            fsys.delete_file(temporary)
        raise
    if local:
        fsync_dir(Path(folder or "/"))


def write_atomically(fsys: fs.FileSystem, path: str, data: bytes, *, sync: bool = True) -> None:
    """Write ``data`` to ``path`` under the durability policy (see :func:`atomic_output`)."""
    with atomic_output(fsys, path, sync=sync) as out:
        out.write(data)


def _digest(content: Any) -> str:
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def encode_record(kind: str, version: int, content: Any) -> bytes:
    """The bytes of a self-describing record: ``kind``, format ``version``, the JSON-able
    ``content`` and its checksum (read back with :func:`decode_record`).

    For records on any pyarrow filesystem, written with :func:`write_atomically`;
    :func:`write_record` and :func:`create_record` write them to local paths.
    """
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
    """Atomically write (or replace) the local record at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(fs.LocalFileSystem(), str(path), encode_record(kind, version, content))


def create_record(path: Path, kind: str, version: int, content: Any) -> bool:
    """Atomically create the record at ``path`` unless one exists; False if it did.

    Uses a hard link, which fails when the target exists, so two writers racing
    for the same name cannot both win.
    """
    tmp = _write_tmp(path, encode_record(kind, version, content))
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
    return decode_record(path.read_bytes(), str(path), kind, versions)


def decode_record(data: bytes, where: str, kind: str, versions: tuple[int, ...]) -> Any:
    """The content of a record's bytes (read from ``where``, named in errors), checked.

    Raises :class:`CheckpointCorruptError` for damaged bytes or another kind of
    record, :class:`IncompatibleFormatError` for a version not in ``versions``.
    """
    try:
        body = json.loads(data)
    except json.JSONDecodeError as exc:
        msg = f"{where}: not a valid firesteel {kind} record ({exc}); it was damaged"
        raise CheckpointCorruptError(msg) from exc
    if not isinstance(body, dict) or body.get("kind") != kind:
        msg = f"{where}: not a firesteel {kind} record"
        raise CheckpointCorruptError(msg)
    if body.get("version") not in versions:
        msg = (
            f"{where}: {kind} format version {body.get('version')} is not one this release "
            f"reads ({', '.join(map(str, versions))}); upgrade firesteel"
        )
        raise IncompatibleFormatError(msg)
    content = body.get("content")
    if body.get("sha256") != _digest(content):
        msg = f"{where}: {kind} record checksum mismatch; the file was damaged or edited"
        raise CheckpointCorruptError(msg)
    return content
