"""A streamed file's checksum and size, taken while it is written rather than read back.

Wrap the output stream in :class:`HashingWriter` and hand it to a streaming
writer (``pa.ipc.new_file``, ``pq.ParquetWriter``, through ``pa.PythonFile``):
once the writer is closed, ``digest`` and ``size`` describe exactly the bytes
written, for a manifest or metadata record to name.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pyarrow as pa


class HashingWriter:
    """A write-only file object that hashes (SHA-256) and counts everything passing
    through to ``out``."""

    def __init__(self, out: pa.NativeFile) -> None:
        self.out = out
        self.digest = hashlib.sha256()
        self.size = 0
        self.closed = False

    def write(self, data: Any) -> int:
        """Pass ``data`` on to ``out``, hashing and counting it."""
        view = memoryview(data)
        self.digest.update(view)
        self.size += view.nbytes
        return int(self.out.write(view))

    def tell(self) -> int:
        """Bytes written so far."""
        return self.size

    def flush(self) -> None:
        """Flush ``out``."""
        self.out.flush()

    def close(self) -> None:
        """Mark the file closed (``out`` is closed by whoever opened it)."""
        self.closed = True
