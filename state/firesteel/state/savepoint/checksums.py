"""A savepoint's files are read only through their checksums: no unchecked byte reaches state.

The metadata record names each data file with its size, the SHA-256 of the
whole file and the SHA-256 of each block of :data:`BLOCK_SIZE` bytes
(:class:`BlockHashingWriter` takes them while the file is written).
:class:`VerifiedFile` is how every reader of a savepoint reads its files (a
restoring task, :func:`~firesteel.backends.savepoint.read_savepoint`,
:func:`~firesteel.state.savepoint.rewrite`, ``firesteel savepoint inspect``):
a seekable file object for pyarrow's Parquet reader that reads whole blocks and
checks each one before handing out any byte of it, so a task reading the row
groups of its own key groups checks the blocks it reads (footer included) and
no more. A block that does not match is a
:class:`~firesteel.core.errors.CheckpointCorruptError` naming the file and the
bytes. A file recorded without block checksums (written by an earlier
release) is one block, read and checked whole.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import pyarrow as pa
from pyarrow import fs

from firesteel.core.hashing import HashingWriter
from firesteel.core.spi import CheckpointCorruptError

BLOCK_SIZE = 1024 * 1024
"""Bytes per checksummed block: a read costs at most a block more on each side."""

_KEPT_BLOCKS = 4
"""Blocks kept after checking: consecutive reads (column chunks) share a boundary block."""


def block_digests(data: bytes, block_size: int = BLOCK_SIZE) -> dict[str, Any]:
    """The block checksums of ``data``, as the metadata records them."""
    digests = [
        hashlib.sha256(data[start : start + block_size]).hexdigest()
        for start in range(0, len(data), block_size)
    ]
    return {"size": block_size, "sha256": digests}


class BlockHashingWriter(HashingWriter):
    """A :class:`HashingWriter` that also takes the SHA-256 of each block of ``block_size``."""

    def __init__(self, out: pa.NativeFile, block_size: int = BLOCK_SIZE) -> None:
        super().__init__(out)
        self.block_size = block_size
        self._done: list[str] = []
        self._block = hashlib.sha256()
        self._filled = 0

    def write(self, data: Any) -> int:
        """Pass ``data`` on, hashing it whole and by block."""
        written = super().write(data)
        view = memoryview(data).cast("B")
        while view.nbytes:
            take = min(self.block_size - self._filled, view.nbytes)
            self._block.update(view[:take])
            self._filled += take
            view = view[take:]
            if self._filled == self.block_size:
                self._done.append(self._block.hexdigest())
                self._block, self._filled = hashlib.sha256(), 0
        return written

    @property
    def blocks(self) -> dict[str, Any]:
        """The block checksums of what was written (the last block may be short)."""
        partial = [self._block.hexdigest()] if self._filled else []
        return {"size": self.block_size, "sha256": [*self._done, *partial]}


class VerifiedFile:
    """The data file ``entry`` of a savepoint (a metadata record's file entry: ``path``
    relative to the savepoint, ``size``, ``sha256``, optional ``blocks``) as a read-only,
    seekable file whose every byte was checked against the record before it is returned.

    ``path`` is the file on ``filesystem``; ``savepoint`` names the savepoint in errors.
    """

    def __init__(
        self, filesystem: fs.FileSystem, path: str, entry: Mapping[str, Any], savepoint: str
    ) -> None:
        self._filesystem = filesystem
        self._path = path
        self._entry = entry
        self._savepoint = savepoint
        self.size = int(entry["size"])
        blocks = entry.get("blocks")
        if blocks is None:
            self._block_size = max(self.size, 1)
            self._digests = [str(entry["sha256"])]
        else:
            self._block_size = int(blocks["size"])
            self._digests = [str(d) for d in blocks["sha256"]]
        self._source: pa.NativeFile | None = None
        self._kept: OrderedDict[int, bytes] = OrderedDict()
        self._position = 0
        self.closed = False

    def __enter__(self) -> VerifiedFile:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def readable(self) -> bool:
        """Always readable."""
        return True

    def seekable(self) -> bool:
        """Always seekable."""
        return True

    def writable(self) -> bool:
        """Never writable."""
        return False

    def tell(self) -> int:
        """The position of the next read."""
        return self._position

    def seek(self, offset: int, whence: int = 0) -> int:
        """Move to ``offset`` from the start (0), the position (1) or the end (2)."""
        base = (0, self._position, self.size)[whence]
        self._position = max(0, base + offset)
        return self._position

    def read(self, nbytes: int | None = -1) -> bytes:
        """Up to ``nbytes`` checked bytes from the position (all the rest when negative)."""
        end = self.size if nbytes is None or nbytes < 0 else min(self.size, self._position + nbytes)
        parts = []
        position = self._position
        while position < end:
            index = position // self._block_size
            block = self._checked_block(index)
            start = position - index * self._block_size
            part = block[start : start + end - position]
            parts.append(part)
            position += len(part)
        self._position = max(self._position, end)
        return b"".join(parts)

    def close(self) -> None:
        """Close the underlying file and drop the checked blocks."""
        if self._source is not None:
            self._source.close()
            self._source = None
        self._kept.clear()
        self.closed = True

    def _checked_block(self, index: int) -> bytes:
        kept = self._kept.get(index)
        if kept is not None:
            self._kept.move_to_end(index)
            return kept
        start = index * self._block_size
        length = min(self._block_size, self.size - start)
        if self._source is None:
            self._source = self._filesystem.open_input_file(self._path)
        data: bytes = self._source.read_at(length, start)
        if index >= len(self._digests) or hashlib.sha256(data).hexdigest() != self._digests[index]:
            msg = (
                f"savepoint {self._savepoint}: {self._entry['path']} bytes {start}-"
                f"{start + length - 1} do not match their checksum in its metadata; the "
                "savepoint was damaged: restore an undamaged copy of it, or take a new one"
            )
            raise CheckpointCorruptError(msg)
        self._kept[index] = data
        if len(self._kept) > _KEPT_BLOCKS:
            self._kept.popitem(last=False)
        return data
