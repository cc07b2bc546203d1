"""The filesystem every firesteel location is reached through: errors name what and where,
and an object store's outage is ridden out.

:func:`guard` wraps the pyarrow filesystem :func:`~firesteel.core.storage.resolve`
makes, so every caller (file source and sink, write-ahead log, snapshots,
savepoints) gets the same behaviour:

* An ``OSError`` becomes a :class:`~firesteel.core.errors.StorageError`
  naming the operation and the path (``cannot write /data/out/part-0:
  [Errno 28] No space left on device``), its ``errno`` kept. A missing file
  stays a :class:`FileNotFoundError` (and an existing one a
  :class:`FileExistsError`): callers ask those questions on purpose, and
  pyarrow's message already names the path.
* On an object store each call is retried through the store's
  :class:`~firesteel.core.store_retry.StoreRetry` window. Every call is
  idempotent there: reads and listings; a write is spooled (in memory up to
  :data:`SPOOL_BYTES`, then on local disk, as Hadoop S3A's disk buffer) and
  uploaded whole when the stream closes, so an upload is sent again from the
  start; a delete or a move whose retry finds its source gone was applied by
  the attempt whose answer was lost. A read that breaks mid-stream reopens the
  object at the position reached.

Local and HDFS calls are not retried: a full disk or a missing permission do
not heal in a minute, and HDFS's client retries on its own.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pyarrow as pa
from pyarrow import fs

from firesteel.core.errors import StorageError
from firesteel.core.store_retry import StoreRetry

T = TypeVar("T")

SPOOL_BYTES = 16 * 1024 * 1024
"""An upload larger than this is spooled to local disk until the stream closes."""
UPLOAD_CHUNK = 4 * 1024 * 1024
PASS_THROUGH = (FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError)
"""Errors that answer a question about the path, left as pyarrow raised them."""


Explain = Callable[[OSError, str], StorageError]
"""Turns a failure of ``<what>`` (``write s3://b/k``) into the error a user reads."""


def guard(
    inner: fs.FileSystem,
    scheme: str = "",
    retry: StoreRetry | None = None,
    explain: Explain | None = None,
) -> fs.FileSystem:
    """``inner`` behind a :class:`GuardedHandler`: ``scheme`` (``s3``) spells its paths as
    URIs in errors, ``retry`` (object stores only) is its outage window, ``explain``
    (picklable) names a failure, :func:`named` by default."""
    return fs.PyFileSystem(GuardedHandler(inner, scheme, retry, explain or named))


def unguarded(filesystem: fs.FileSystem) -> fs.FileSystem:
    """The pyarrow filesystem behind ``filesystem`` (itself when it is not guarded)."""
    handler = getattr(filesystem, "handler", None)
    return handler.inner if isinstance(handler, GuardedHandler) else filesystem


def retry_of(filesystem: fs.FileSystem) -> StoreRetry | None:
    """The outage window of ``filesystem``'s store, None where calls are not retried."""
    handler = getattr(filesystem, "handler", None)
    return handler.retry if isinstance(handler, GuardedHandler) else None


def store_type(filesystem: fs.FileSystem) -> str:
    """pyarrow's name of the store behind ``filesystem``: ``local``, ``s3``, ``gcs``, ..."""
    return str(unguarded(filesystem).type_name)


class GuardedHandler(fs.FileSystemHandler):
    """A pyarrow filesystem handler forwarding to ``inner`` (see the module docs)."""

    def __init__(
        self, inner: fs.FileSystem, scheme: str, retry: StoreRetry | None, explain: Explain
    ) -> None:
        self.inner = inner
        self.scheme = scheme
        self.retry = retry
        self.explain = explain

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GuardedHandler) and self.inner.equals(other.inner)

    def __hash__(self) -> int:
        return hash(self.inner.type_name)

    def where(self, path: str) -> str:
        """``path`` as a user spells it: ``s3://bucket/key``, or the local path."""
        return f"{self.scheme}://{path}" if self.scheme else path

    def _call(self, call: Callable[[], T], action: str, path: str, to: str = "") -> T:
        """``call()`` with the module's error naming and, on an object store, retries;
        ``action``, ``path`` and ``to`` (a move's or copy's target) name it."""
        what = f"{action} {self.where(path)}" + (f" to {self.where(to)}" if to else "")
        try:
            if self.retry is None:
                return call()
            return self.retry.run(call, what)
        except PASS_THROUGH:
            raise
        except StorageError:
            raise
        except OSError as exc:
            raise self.explain(exc, what) from exc

    # -- pyarrow's handler interface ------------------------------------------------

    def get_type_name(self) -> str:
        return str(self.inner.type_name)

    def normalize_path(self, path: str) -> str:
        return str(self.inner.normalize_path(path))

    def equals(self, other: Any) -> bool:
        return self == other

    def get_file_info(self, paths: list[str]) -> list[fs.FileInfo]:
        label = paths[0] if len(paths) == 1 else f"{len(paths)} paths under {paths[0]}"
        return self._call(lambda: list(self.inner.get_file_info(paths)), "look up", label)

    def get_file_info_selector(self, selector: fs.FileSelector) -> list[fs.FileInfo]:
        return self._call(
            lambda: list(self.inner.get_file_info(selector)), "list", selector.base_dir
        )

    def create_dir(self, path: str, recursive: bool) -> None:
        self._call(lambda: self.inner.create_dir(path, recursive=recursive), "create folder", path)

    def delete_dir(self, path: str) -> None:
        self._call(self._applied(lambda: self.inner.delete_dir(path)), "delete folder", path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self._call(
            lambda: self.inner.delete_dir_contents(path, missing_dir_ok=missing_dir_ok),
            "delete the contents of",
            path,
        )

    def delete_root_dir_contents(self) -> None:
        self._call(lambda: self.inner.delete_dir_contents("/", accept_root_dir=True), "delete", "/")

    def delete_file(self, path: str) -> None:
        self._call(self._applied(lambda: self.inner.delete_file(path)), "delete", path)

    def move(self, src: str, dest: str) -> None:
        def move() -> None:
            self.inner.move(src, dest)

        def landed() -> bool:
            return bool(self.inner.get_file_info(dest).type != fs.FileType.NotFound)

        self._call(self._applied(move, landed), "move", src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        self._call(lambda: self.inner.copy_file(src, dest), "copy", src, dest)

    def open_input_stream(self, path: str) -> pa.NativeFile:
        # The raw bytes: pyarrow decompresses what a handler returns (compression="detect").
        opened = self._call(
            lambda: self.inner.open_input_stream(path, compression=None), "open", path
        )
        if self.retry is None:
            return opened
        return pa.PythonFile(_RetriedReader(self, path, opened), mode="r")

    def open_input_file(self, path: str) -> pa.NativeFile:
        opened = self._call(lambda: self.inner.open_input_file(path), "open", path)
        if self.retry is None:
            return opened
        return pa.PythonFile(_RetriedReader(self, path, opened), mode="r")

    def open_output_stream(self, path: str, metadata: Any) -> pa.NativeFile:
        if self.retry is not None:
            return pa.PythonFile(_SpooledUpload(self, path, metadata), mode="w")
        opened = self._call(
            lambda: self.inner.open_output_stream(path, compression=None, metadata=metadata),
            "write",
            path,
        )
        return pa.PythonFile(_NamedWriter(self, path, opened), mode="w")

    def open_append_stream(self, path: str, metadata: Any) -> pa.NativeFile:
        opened = self._call(
            lambda: self.inner.open_append_stream(path, compression=None, metadata=metadata),
            "append to",
            path,
        )
        return pa.PythonFile(_NamedWriter(self, path, opened), mode="w")

    def _applied(
        self, call: Callable[[], None], landed: Callable[[], bool] | None = None
    ) -> Callable[[], None]:
        """``call`` made safe to send again: once an attempt has failed, a retry finding its
        path gone (and ``landed()``, when given) means the lost attempt was applied."""
        failed = False

        def attempt() -> None:
            nonlocal failed
            try:
                call()
            except FileNotFoundError:
                if failed and (landed is None or landed()):
                    return
                raise
            except OSError:
                failed = True
                raise

        return attempt


def named(error: OSError, what: str) -> StorageError:
    """``error`` as a StorageError saying ``cannot <what>: <error>``, its errno kept."""
    detail = str(error).splitlines()[0] if str(error) else type(error).__name__
    failure = StorageError(f"cannot {what}: {detail.split(' (Request ID')[0]}")
    failure.errno = error.errno
    return failure


class _NamedWriter:
    """A local (or HDFS) output stream whose failures name the file (a full disk, mostly)."""

    def __init__(self, handler: GuardedHandler, path: str, stream: pa.NativeFile) -> None:
        self.what = f"write {handler.where(path)}"
        self.explain = handler.explain
        self.stream = stream
        self.closed = False

    @contextlib.contextmanager
    def _naming(self) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise self.explain(exc, self.what) from exc

    def write(self, data: bytes) -> int:
        with self._naming():
            return int(self.stream.write(data))

    def tell(self) -> int:
        return int(self.stream.tell())

    def flush(self) -> None:
        with self._naming():
            self.stream.flush()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with self._naming():
            self.stream.close()


class _SpooledUpload:
    """An object-store output stream: bytes spooled here, uploaded whole on close, the upload
    sent again from the start while the store is away (see the module docs)."""

    def __init__(self, handler: GuardedHandler, path: str, metadata: Any) -> None:
        self.handler = handler
        self.path = path
        self.metadata = metadata
        self.spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115
        self.closed = False

    def write(self, data: bytes) -> int:
        return self.spool.write(data)

    def tell(self) -> int:
        return self.spool.tell()

    def flush(self) -> None:
        """Nothing to do: the object exists only once the stream closes."""

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.handler._call(self._upload, "write", self.path)
        finally:
            self.spool.close()

    def _upload(self) -> None:
        self.spool.seek(0)
        inner = self.handler.inner
        with inner.open_output_stream(self.path, compression=None, metadata=self.metadata) as out:
            while chunk := self.spool.read(UPLOAD_CHUNK):
                out.write(chunk)


class _RetriedReader:
    """An object-store input file whose reads, when the store drops them, reopen the object
    and read again from the position reached."""

    def __init__(self, handler: GuardedHandler, path: str, opened: pa.NativeFile) -> None:
        self.handler = handler
        self.path = path
        self.file = opened
        self.position = 0
        self.random_access = opened.seekable()
        self.closed = False

    def _reopen(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()
        self.file = self.handler.inner.open_input_file(self.path)
        self.random_access = True
        self.file.seek(self.position)

    def _read(self, call: Callable[[], T]) -> T:
        broken = False

        def attempt() -> T:
            nonlocal broken
            if broken:
                self._reopen()
            try:
                return call()
            except OSError:
                broken = True
                raise

        return self.handler._call(attempt, "read", self.path)

    def read(self, size: int = -1) -> bytes:
        data = self._read(lambda: self.file.read(size if size >= 0 else None))
        self.position += len(data)
        return bytes(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        if not self.random_access:
            self._read(self._reopen)
        self.position = int(self.file.seek(offset, whence))
        return self.position

    def tell(self) -> int:
        return self.position

    def size(self) -> int:
        return int(self._read(self.file.size))

    def seekable(self) -> bool:
        return True

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.file.close()
