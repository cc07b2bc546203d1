"""A folder on any store the storage layer resolves, addressed by relative keys.

The file connector's one view of its locations (the sink's output, the
source's input, its discovered-file log and archive): a location plus the
``fs.*`` settings that reach it. The sink's writer, manifest and committer
name everything relative to it (``_firesteel/pending/...``, ``col=v/part-...``),
the source its files and log segments, and it turns that into pyarrow
filesystem calls. It travels to the tasks inside the sink and the source's
partitions, so it pickles the location and the settings and resolves the
filesystem lazily.

Object stores have no folders and no rename; the few places where that
matters ask :attr:`Folder.object_store`:
no folder is ever created there (a key needs none, a marker costs a PUT), and
:meth:`Folder.move` is pyarrow's server-side copy then delete (the copy makes
the target whole at once; the source lingers if a crash comes in between).
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Any

from pyarrow import NativeFile, fs
from pyarrow.fs import FileInfo

from firesteel.core.spi import (
    OBJECT_STORES,
    Location,
    StorageConfig,
    option,
    resolve,
    storage_error,
    store_type,
)


def path_option(role: str) -> Any:
    """Declare the ``path`` option of a side of the connector (see
    :func:`~firesteel.core.options.option`); ``role`` says what the folder is to it."""
    return option(
        required=True,
        doc=f"{role}: an absolute path or a URI (s3a://bucket/prefix, gs://, abfss://); a "
        "store's fs.* settings (fs.s3a.endpoint, ...) are options too",
    )


class Folder:
    """The folder ``uri`` reached with ``config``; every key is relative to it."""

    def __init__(self, uri: str, config: StorageConfig | None = None) -> None:
        self.uri = uri.rstrip("/")
        self.config = config or StorageConfig()

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its settings: the cached location (a filesystem) stays in this process.
        return type(self), (self.uri, self.config)

    @functools.cached_property
    def location(self) -> Location:
        """The resolved root (filesystem and path)."""
        return resolve(self.uri, self.config)

    @property
    def fs(self) -> fs.FileSystem:
        """The pyarrow filesystem of the output."""
        return self.location.filesystem

    @property
    def object_store(self) -> bool:
        """True on S3, GCS and Azure: no folders, no rename, a PUT is atomic per object."""
        return store_type(self.fs) in OBJECT_STORES

    def path(self, key: str) -> str:
        """The filesystem path of ``key``."""
        return f"{self.location.path}/{key}" if key else self.location.path

    def uri_of(self, key: str) -> str:
        """``key`` as a location (``s3a://b/out/key`` or ``/out/key``) for durable records."""
        return f"{self.uri}/{key}"

    def error(self, exc: OSError, action: str) -> OSError:
        """``exc`` as a StorageError naming the output and the setting to fix (object stores)."""
        if not self.object_store:
            return exc
        return storage_error(exc, self.location, action, self.config)

    def exists(self, key: str) -> bool:
        """Whether the file ``key`` exists."""
        return bool(self.fs.get_file_info(self.path(key)).type == fs.FileType.File)

    def size(self, key: str) -> int:
        """The size of file ``key`` in bytes."""
        return int(self.fs.get_file_info(self.path(key)).size or 0)

    def info(self, key: str) -> FileInfo:
        """What the store says about ``key`` (type, size, mtime)."""
        return self.fs.get_file_info(self.path(key))

    def entries(self, folder: str) -> list[FileInfo]:
        """What is directly under ``folder`` (files and folders); empty when it is missing.

        One listing: on S3 a LIST request with a delimiter per 1,000 entries.
        """
        selector = fs.FileSelector(self.path(folder), allow_not_found=True)
        return list(self.fs.get_file_info(selector))

    def names(self, folder: str) -> list[str]:
        """Base names directly under ``folder`` (files and folders); empty when it is missing."""
        return sorted(info.base_name for info in self.entries(folder))

    def open_input(self, key: str) -> NativeFile:
        """The bytes of file ``key``, as stored (no decompression)."""
        return self.fs.open_input_stream(self.path(key), compression=None)

    def open_output(self, key: str) -> NativeFile:
        """A new file ``key``; on an object store it exists only once closed (one atomic PUT)."""
        if not self.object_store:
            self.fs.create_dir(self.path(key).rpartition("/")[0], recursive=True)
        # compression=None: pyarrow would otherwise compress a ".gz" name a second time.
        return self.fs.open_output_stream(self.path(key), compression=None)

    def sync(self, key: str) -> None:
        """Make a closed local file, or the renames into a local folder, durable (on other
        stores the closing PUT or the copy already is)."""
        if store_type(self.fs) != "local":
            return
        fd = os.open(self.path(key), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def move(self, source: str, target: str) -> None:
        """Rename locally; server-side copy then delete on an object store."""
        if not self.object_store:
            self.fs.create_dir(self.path(target).rpartition("/")[0], recursive=True)
        self.fs.move(self.path(source), self.path(target))

    def receive(self, source: Folder, key: str) -> None:
        """Move file ``key`` of ``source`` to the same key here: :meth:`move` within one store,
        a streamed copy then a delete across stores (the copy is whole only on object stores,
        so a caller that may crash compares sizes before trusting a local target)."""
        if not self.object_store:
            self.fs.create_dir(self.path(key).rpartition("/")[0], recursive=True)
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
