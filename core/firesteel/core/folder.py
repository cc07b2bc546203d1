"""A folder on any store, addressed by relative keys: the one way firesteel touches storage.

Every component that keeps files (the file sink and source, the records beside
Spark's checkpoint, write-ahead segments, state snapshots, RocksDB checkpoints)
holds a :class:`Folder` and names what it keeps relative to it
(``v000000000007/0000-0063-full-<digest>.snap``, ``_firesteel/pending/...``).
The folder turns that into pyarrow filesystem calls on the location
:func:`~firesteel.core.storage.resolve` reaches (local paths and the URIs
Spark users write), whose failures are
:class:`~firesteel.core.errors.StorageError` naming the operation and the path
(:mod:`firesteel.core.guarded_fs`); whole-file writes follow the durability
policy of :mod:`firesteel.core.durable` and records its envelope.

A folder travels to the tasks inside sinks, sources and backends: it pickles
its location and settings and resolves the filesystem lazily, once per process.

Object stores have no folders and no rename; the few places where that
matters ask :attr:`Folder.object_store`: no folder is ever created there (a
key needs none, a marker costs a PUT), and :meth:`Folder.move` is pyarrow's
server-side copy then delete (the copy makes the target whole at once; the
source lingers if a crash comes in between).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

from pyarrow import NativeFile, fs
from pyarrow.fs import FileInfo

from firesteel.core.durable import (
    atomic_output,
    create_atomically,
    decode_record,
    encode_record,
    fsync,
    make_parent,
    write_atomically,
)
from firesteel.core.guarded_fs import store_type
from firesteel.core.storage import OBJECT_STORES, Location, StorageConfig, resolve, storage_error


class Folder:
    """The folder ``uri`` reached with ``config``; every key is relative to it (``""`` is the
    folder itself)."""

    def __init__(self, uri: str, config: StorageConfig | None = None) -> None:
        self.uri = uri.rstrip("/") or uri
        self.config = config or StorageConfig()

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its settings: the cached location (a filesystem) stays in this process.
        return type(self), (self.uri, self.config)

    def __repr__(self) -> str:
        return f"Folder({self.uri!r})"

    @functools.cached_property
    def location(self) -> Location:
        """The resolved root (filesystem and path)."""
        return resolve(self.uri, self.config)

    @property
    def fs(self) -> fs.FileSystem:
        """The pyarrow filesystem of the folder."""
        return self.location.filesystem

    @property
    def object_store(self) -> bool:
        """True on S3, GCS and Azure: no folders, no rename, a PUT is atomic per object."""
        return store_type(self.fs) in OBJECT_STORES

    def child(self, key: str) -> Folder:
        """The folder ``key`` under this one, on the same filesystem (resolved once)."""
        child = Folder(self.uri_of(key), self.config)
        if "location" in self.__dict__:
            base = self.location
            child.location = Location(
                base.filesystem, self.path(key), child.uri, base.setting_prefix
            )
        return child

    def path(self, key: str = "") -> str:
        """The filesystem path of ``key``."""
        root = self.location.path
        return f"{root.rstrip('/')}/{key}" if key else root

    def uri_of(self, key: str) -> str:
        """``key`` as a location (``s3a://b/out/key`` or ``/out/key``)."""
        return f"{self.uri}/{key}" if key else self.uri

    def key_of(self, path: str) -> str:
        """The key of a filesystem ``path`` under this folder (what a listing returns)."""
        root = self.location.path.rstrip("/")
        return path[len(root) + 1 :] if path.startswith(f"{root}/") else path

    def describe(self, path: str) -> str:
        """A filesystem ``path`` as users should see it in messages (with the URI scheme
        when the folder has one)."""
        if "://" in self.uri:
            return f"{self.uri.split('://', 1)[0]}://{path}"
        return path

    def error(self, exc: OSError, action: str) -> OSError:
        """``exc`` as a StorageError naming the folder and the setting to fix (object stores)."""
        if not self.object_store:
            return exc
        return storage_error(exc, self.location, action, self.config)

    # -- reading ----------------------------------------------------------------------------

    def exists(self, key: str) -> bool:
        """Whether the file ``key`` exists."""
        return bool(self.info(key).type == fs.FileType.File)

    def size(self, key: str) -> int:
        """The size of file ``key`` in bytes."""
        return int(self.info(key).size or 0)

    def info(self, key: str) -> FileInfo:
        """What the store says about ``key`` (type, size, mtime)."""
        return self.fs.get_file_info(self.path(key))

    def entries(self, folder: str = "", *, recursive: bool = False) -> list[FileInfo]:
        """What is under ``folder`` (files and folders; directly under it unless
        ``recursive``); empty when it is missing.

        One listing: on S3 a LIST request per 1,000 entries.
        """
        selector = fs.FileSelector(self.path(folder), allow_not_found=True, recursive=recursive)
        return list(self.fs.get_file_info(selector))

    def names(self, folder: str = "") -> list[str]:
        """Base names directly under ``folder`` (files and folders); empty when it is missing."""
        return sorted(info.base_name for info in self.entries(folder))

    def read(self, key: str) -> bytes:
        """The whole file ``key``; :class:`FileNotFoundError` when it is missing."""
        # A random-access file reads its whole size in one request; a stream reads an
        # object in 256 KiB GETs.
        with self.fs.open_input_file(self.path(key)) as file:
            return bytes(file.read())

    def read_record(self, key: str, kind: str, versions: tuple[int, ...]) -> Any:
        """The content of the record ``key`` (see :func:`~firesteel.core.durable.read_record`)."""
        return decode_record(self.read(key), self.uri_of(key), kind, versions)

    def open_input(self, key: str) -> NativeFile:
        """The bytes of file ``key``, as stored (no decompression)."""
        return self.fs.open_input_stream(self.path(key), compression=None)

    # -- writing ----------------------------------------------------------------------------

    def make(self, folder: str = "") -> None:
        """Create ``folder`` and its parents where folders exist (not on object stores,
        where a key needs none and a marker would cost a request)."""
        if not self.object_store:
            self.fs.create_dir(self.path(folder), recursive=True)

    def open_output(self, key: str) -> NativeFile:
        """A new file ``key``, written in place; on an object store it exists only once
        closed (one atomic PUT). :meth:`output` writes one whole or not at all."""
        self.make(key.rpartition("/")[0])
        # compression=None: pyarrow would otherwise compress a ".gz" name a second time.
        return self.fs.open_output_stream(self.path(key), compression=None)

    @contextlib.contextmanager
    def output(self, key: str, *, sync: bool = True) -> Iterator[NativeFile]:
        """A stream whose content appears at ``key`` whole when the block ends without error
        (:func:`~firesteel.core.durable.atomic_output`; ``sync=False`` skips the fsyncs)."""
        make_parent(self.fs, self.path(key))
        with atomic_output(self.fs, self.path(key), sync=sync) as out:
            yield out

    def write(self, key: str, data: bytes, *, sync: bool = True) -> None:
        """Write (or replace) file ``key`` whole, under the durability policy."""
        make_parent(self.fs, self.path(key))
        write_atomically(self.fs, self.path(key), data, sync=sync)

    def create(self, key: str, data: bytes) -> bool:
        """Create file ``key`` unless it exists; False if it did (two racing writers cannot
        both win where the store can tell: see :func:`~firesteel.core.durable.create_record`)."""
        target = self.child(key).location
        make_parent(target.filesystem, target.path)
        return create_atomically(target, data, self.config)

    def write_record(self, key: str, kind: str, version: int, content: Any) -> None:
        """Write (or replace) the record ``key`` (the envelope of :mod:`firesteel.core.durable`)."""
        self.write(key, encode_record(kind, version, content))

    def sync(self, key: str) -> None:
        """Make a closed local file, or the renames into a local folder, durable (on other
        stores the closing PUT or the copy already is)."""
        if store_type(self.fs) == "local":
            fsync(self.path(key))

    def move(self, source: str, target: str) -> None:
        """Rename locally; server-side copy then delete on an object store."""
        self.make(target.rpartition("/")[0])
        self.fs.move(self.path(source), self.path(target))

    def receive(self, source: Folder, key: str) -> None:
        """Move file ``key`` of ``source`` to the same key here: :meth:`move` within one store,
        a streamed copy then a delete across stores (the copy is whole only on object stores,
        so a caller that may crash compares sizes before trusting a local target)."""
        self.make(key.rpartition("/")[0])
        if source.fs.equals(self.fs):
            self.fs.move(source.path(key), self.path(key))
            return
        fs.copy_files(
            source.path(key),
            self.path(key),
            source_filesystem=source.fs,
            destination_filesystem=self.fs,
        )
        source.delete(key)

    def delete(self, key: str) -> None:
        """Delete file ``key`` if it exists."""
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(self.path(key))

    def delete_folder(self, folder: str) -> None:
        """Delete ``folder`` and everything under it, if it exists."""
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_dir(self.path(folder))
