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

On top of that, this module is the one envelope of firesteel's
self-describing JSON records (the file source's discovered-file log, the file
sink's manifests and owner records, write-ahead-log plans, RocksDB manifests),
on any pyarrow filesystem (local paths and URIs): versioned and checksummed, so
a reader refuses a damaged record or a format it does not know.
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

from firesteel.core.conditional_put import conditional_create
from firesteel.core.errors import CheckpointCorruptError, IncompatibleFormatError
from firesteel.core.guarded_fs import named, store_type
from firesteel.core.storage import OBJECT_STORES, Location, StorageConfig, resolve


def fsync(path: str | Path) -> None:
    """Make a closed local file, or the renames and creations inside a local folder, durable."""
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
    if store_type(fsys) in OBJECT_STORES:
        with fsys.open_output_stream(path) as out:
            yield out
        return
    folder, _, name = path.rpartition("/")
    temporary = f"{folder}/.{name}.{uuid.uuid4().hex}.tmp"
    local = sync and store_type(fsys) == "local"
    try:
        with fsys.open_output_stream(temporary) as out:
            yield out
        if local:
            fsync(temporary)
        fsys.move(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            fsys.delete_file(temporary)
        raise
    if local:
        fsync(folder or "/")


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

    The one envelope of every firesteel record (manifests, owner records, logs,
    write-ahead plans, RocksDB manifests); :func:`write_record`,
    :func:`create_record` and :func:`read_record` put it on any filesystem.
    """
    body = {"kind": kind, "version": version, "content": content, "sha256": _digest(content)}
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def _resolve(location: str | Path, config: StorageConfig | None) -> tuple[fs.FileSystem, str]:
    """The filesystem and path of a local path or a URI, as :mod:`firesteel.core.storage`
    resolves every location (``config``: how to reach an object store)."""
    resolved = resolve(str(location), config)
    return resolved.filesystem, resolved.path


def make_parent(fsys: fs.FileSystem, path: str) -> None:
    """Create the folder of ``path`` where folders exist.

    Object stores have none (a key's prefix needs no object): creating one
    there would cost a request per level and leave marker objects, so nothing
    is done.
    """
    folder = path.rpartition("/")[0]
    if folder and store_type(fsys) not in OBJECT_STORES:
        fsys.create_dir(folder, recursive=True)


def write_record(
    location: str | Path,
    kind: str,
    version: int,
    content: Any,
    config: StorageConfig | None = None,
) -> None:
    """Atomically write (or replace) the record at ``location`` (a local path or a URI;
    ``config``: how to reach an object store)."""
    fsys, path = _resolve(location, config)
    make_parent(fsys, path)
    write_atomically(fsys, path, encode_record(kind, version, content))


def create_record(
    location: str | Path,
    kind: str,
    version: int,
    content: Any,
    config: StorageConfig | None = None,
) -> bool:
    """Atomically create the record at ``location`` unless one exists; False if it did.

    Two writers racing for one name cannot both win: locally the record is a
    hard link, which fails when the target exists; on S3 a conditional PUT
    (:mod:`firesteel.core.conditional_put`). Other filesystems (and S3
    without boto3) have no create-if-absent in pyarrow: the record is written
    when none exists, so two racing writers may both succeed there (and the
    later one's record stays); callers read the record back after creating it.
    """
    resolved = resolve(str(location), config)
    make_parent(resolved.filesystem, resolved.path)
    return create_atomically(resolved, encode_record(kind, version, content), config)


def create_atomically(location: Location, data: bytes, config: StorageConfig | None = None) -> bool:
    """Create the file at ``location`` with ``data`` unless one exists; False if it did.

    The create-if-absent of :func:`create_record` (its docs say how each store
    does it) for any bytes; the file's folder must exist where folders do
    (:func:`make_parent`).
    """
    fsys, path = location.filesystem, location.path
    if store_type(fsys) == "s3":
        created = conditional_create(location, data, config or StorageConfig())
        if created is not None:
            return created
    if store_type(fsys) != "local":
        if fsys.get_file_info(path).type != fs.FileType.NotFound:
            return False
        write_atomically(fsys, path, data)
        return True
    target = Path(path)
    tmp = _write_tmp(target, data)
    try:
        os.link(tmp, target)
    except FileExistsError:
        return False
    except OSError as exc:
        raise named(exc, f"create {target}") from exc
    finally:
        tmp.unlink()
    fsync(target.parent)
    return True


def _write_tmp(path: Path, data: bytes) -> Path:
    """``data`` in a new temporary file beside ``path``, synced; a failure (a full disk)
    names the file and removes it."""
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    try:
        with tmp.open("wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise named(exc, f"write {tmp}") from exc
    return tmp


def read_record(
    location: str | Path,
    kind: str,
    versions: tuple[int, ...],
    config: StorageConfig | None = None,
) -> Any:
    """The content of the record at ``location``, checked; raises if corrupt or unknown.

    A missing record raises :class:`FileNotFoundError`.
    """
    fsys, path = _resolve(location, config)
    # A random-access file reads its whole size in one request; a stream reads an object
    # in 256 KiB GETs, so a growing record (the file sink's compact manifest) would cost
    # more requests every time it is read.
    with fsys.open_input_file(path) as file:
        data = file.read()
    return decode_record(data, str(location), kind, versions)


def decode_record(data: bytes, where: str, kind: str, versions: tuple[int, ...]) -> Any:
    """The content of a record's bytes (read from ``where``, named in errors), checked.

    Raises :class:`CheckpointCorruptError` for damaged bytes or another kind of
    record, :class:`IncompatibleFormatError` for a version not in ``versions``.
    """
    try:
        body = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
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
