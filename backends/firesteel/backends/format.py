"""The snapshot file format: self-describing, versioned, checksummed, never pickled.

Layout of one snapshot file (all integers little-endian)::

    offset  size  field
    0       8     magic b"FSSTATE\\0"
    8       2     format version (u16) -- read before anything else
    10      4     header length H (u32)
    14      H     header: UTF-8 JSON (operator, version, kind, key groups,
                  states with their kind and serializer, body length and digest)
    14+H    4     CRC-32 of bytes [0, 14+H)
    18+H    ...   body: an Arrow IPC stream (zstd-compressed buffers), one row
                  per state operation (see :data:`BODY_SCHEMA`)

Integrity: the header CRC catches a damaged header, the body's length and
BLAKE2b digest (recorded in the header) catch a truncated or damaged body. A
file whose format version this release does not know raises
:class:`~firesteel.core.errors.IncompatibleFormatError` before its header is
parsed, so future layouts fail clearly instead of deep in deserialization.
Every failure names the file.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
import zlib
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from firesteel.core.spi import CheckpointCorruptError, IncompatibleFormatError

MAGIC = b"FSSTATE\0"
FORMAT_VERSION = 1
"""Bump on any incompatible change of the header or body; readers refuse other versions."""

_PREFIX = struct.Struct("<8sHI")
_CRC = struct.Struct("<I")

OP_PUT = 0
"""Set the entry (value: key; map: key + user key; timers: key + timestamp)."""
OP_DELETE = 1
"""Remove the entry (value: key; map: key + user key)."""
OP_APPEND = 2
"""Append one element to a list."""
OP_CLEAR = 3
"""Remove everything of the key in this state (list, map, timers)."""

BODY_SCHEMA = pa.schema(
    [
        pa.field("key_group", pa.int16(), nullable=False),
        pa.field("state", pa.dictionary(pa.int16(), pa.string()), nullable=False),
        pa.field("op", pa.int8(), nullable=False),
        pa.field("key", pa.binary(), nullable=False),
        pa.field("user_key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("expires_ms", pa.int64()),
    ]
)
"""One row per state operation; rows of a key group apply in file order."""

_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="zstd")


@dataclass(frozen=True)
class Snapshot:
    """A decoded snapshot: its header fields and its rows as an Arrow table."""

    header: dict[str, Any]
    rows: pa.Table


def digest(data: bytes) -> str:
    """The BLAKE2b-64 hex digest used in headers and file names."""
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def encode_body(rows: pa.Table) -> bytes:
    """Serialize the rows as a compressed Arrow IPC stream."""
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, BODY_SCHEMA, options=_IPC_OPTIONS) as writer:
        writer.write_table(rows)
    return sink.getvalue()


def encode(header: dict[str, Any], body: bytes) -> tuple[bytes, str]:
    """A complete snapshot file and its body digest; the header gains ``body_length`` and
    ``body_digest``."""
    body_digest = digest(body)
    full_header = dict(header, body_length=len(body), body_digest=body_digest)
    header_bytes = json.dumps(full_header, sort_keys=True).encode()
    prefix = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(header_bytes)) + header_bytes
    return prefix + _CRC.pack(zlib.crc32(prefix)) + body, body_digest


def read_header(data: bytes, path: str) -> tuple[dict[str, Any], int]:
    """Check magic, version and header CRC; return the header and where the body starts."""
    if len(data) < _PREFIX.size:
        msg = f"state snapshot {path} is truncated ({len(data)} bytes): restore from an intact copy"
        raise CheckpointCorruptError(msg)
    magic, version, header_length = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        msg = f"{path} is not a firesteel state snapshot (bad magic {magic!r})"
        raise CheckpointCorruptError(msg)
    if version != FORMAT_VERSION:
        msg = (
            f"state snapshot {path} has format version {version}; this firesteel reads "
            f"version {FORMAT_VERSION}: use the firesteel release that wrote it, or start "
            "the operator with a fresh state location"
        )
        raise IncompatibleFormatError(msg)
    end = _PREFIX.size + header_length
    if len(data) < end + _CRC.size:
        msg = f"state snapshot {path} is truncated inside its header"
        raise CheckpointCorruptError(msg)
    (stored_crc,) = _CRC.unpack_from(data, end)
    if zlib.crc32(data[:end]) != stored_crc:
        msg = f"state snapshot {path}: header checksum mismatch (the file is damaged)"
        raise CheckpointCorruptError(msg)
    try:
        header = json.loads(data[_PREFIX.size : end])
    except ValueError as exc:
        msg = f"state snapshot {path}: unreadable header"
        raise CheckpointCorruptError(msg) from exc
    return header, end + _CRC.size


def decode(data: bytes, path: str) -> Snapshot:
    """Verify and decode a whole snapshot file (``path`` is only used in messages)."""
    header, body_start = read_header(data, path)
    body = data[body_start:]
    if len(body) != header["body_length"]:
        msg = (
            f"state snapshot {path} is truncated or padded: body has {len(body)} bytes, "
            f"header says {header['body_length']}"
        )
        raise CheckpointCorruptError(msg)
    if digest(body) != header["body_digest"]:
        msg = f"state snapshot {path}: body checksum mismatch (the file is damaged)"
        raise CheckpointCorruptError(msg)
    try:
        rows = pa.ipc.open_stream(body).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        msg = f"state snapshot {path}: body passed its checksum but is not valid Arrow"
        raise CheckpointCorruptError(msg) from exc
    if not rows.schema.equals(BODY_SCHEMA):
        msg = f"state snapshot {path}: unexpected body schema {rows.schema}"
        raise CheckpointCorruptError(msg)
    return Snapshot(header, rows)
