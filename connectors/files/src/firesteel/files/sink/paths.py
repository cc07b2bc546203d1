"""Where the file sink puts things, and the safe encoding of bucket values into folder names.

Layout under the output folder ``<out>``::

    <out>/<col>=<value>/.../part-<batch>-<partition>-<n>-<sink>.<ext>    committed data
    <out>/_firesteel/pending/<sink>/<batch>/<partition>-<attempt>-<n>-<token>.<ext>  in progress
    <out>/_firesteel/manifests/<sink>/<batch>.json                       what batch N committed
    <out>/_firesteel/manifests/<sink>/<batch>.compact.json               batches <= N, folded

Everything of firesteel's own lives under ``_firesteel/``, which Spark and
pyarrow skip (``_`` prefix), so a plain read of ``<out>`` sees committed files
only. Pending and manifest folders are per sink id: a second query (or a new
checkpoint) writing into the same folder can never mistake another's batch N
for its own.
"""

from __future__ import annotations

import re
from typing import Any

from firesteel.core.spi import RecordError

OUTPUT_RECORDS_DIR = "_firesteel"
"""firesteel's folder inside a data folder (the sink's pending files, manifests and owners,
the file source's default log of discovered files): its name starts
with ``_`` so Spark's and pyarrow's dataset readers skip it. Not the checkpoint's
``firesteel`` folder (``firesteel.core.layout.FIRESTEEL_DIR``), which Spark never reads."""
NULL_VALUE = "__HIVE_DEFAULT_PARTITION__"
"""Hive's and Spark's folder value for null (and, as Spark writes it, the empty string)."""

# Spark's ExternalCatalogUtils escapes these (plus control characters); we add
# nothing else, so Spark's and pyarrow's Hive partition discovery decode our names.
_ESCAPED = set("\"#%'*/:=?\\\x7f{[]^")
_SINK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def encode_value(value: Any) -> str:
    """The folder-name form of one bucket value: ``..``, ``/``, NUL... can never escape.

    Percent-encodes ``"#%'*/:=?\\{[]^``, DEL and control characters (NUL
    included), as Spark does; ``.`` and ``..`` become ``%2E`` and ``%2E%2E``;
    null and the empty string become ``__HIVE_DEFAULT_PARTITION__`` (Spark's
    convention; the data files keep the exact value), and a literal value equal
    to that marker is escaped so it stays distinct from null.
    """
    if value is None:
        return NULL_VALUE
    text = value if isinstance(value, str) else str(value)
    if text == "":
        return NULL_VALUE
    if text in (".", ".."):
        return "%2E" * len(text)
    encoded = "".join(f"%{ord(ch):02X}" if ch in _ESCAPED or ord(ch) < 0x20 else ch for ch in text)
    if encoded == NULL_VALUE:
        return "%5F" + encoded[1:]
    return encoded


MAX_NAME_BYTES = 255
"""Longest file or folder name (in UTF-8 bytes) the common filesystems accept."""


def bucket_dir(columns: tuple[str, ...], values: tuple[Any, ...]) -> str:
    """``col=value/col2=value2`` for one bucket (empty for no bucketing).

    Raises :class:`~firesteel.core.errors.RecordError` naming the column and the
    value when a folder name would exceed :data:`MAX_NAME_BYTES`: the task
    fails before it votes, so nothing of the batch is committed and no restart
    is left with renames that can never succeed.
    """
    names = []
    for column, value in zip(columns, values, strict=True):
        name = f"{encode_value(column)}={encode_value(value)}"
        size = len(name.encode("utf-8"))
        if size > MAX_NAME_BYTES:
            shown = str(value)
            shown = shown if len(shown) <= 60 else f"{shown[:60]}... ({len(shown)} characters)"
            msg = (
                f"option 'bucket.by': the value {shown!r} of column {column!r} makes a folder "
                f"name of {size} bytes, over the filesystem limit of {MAX_NAME_BYTES}; the "
                "batch fails before anything is committed (the file sink has no error "
                "policy): bucket by a column with shorter values, or filter such rows upstream"
            )
            raise RecordError(msg)
        names.append(name)
    return "/".join(names)


def valid_sink_id(sink_id: str) -> bool:
    """A sink id names folders and files, so it is restricted to ``[A-Za-z0-9._-]``."""
    return bool(_SINK_ID.match(sink_id))


def pending_dir(sink_id: str, batch_id: int) -> str:
    """Folder (relative to ``<out>``) of batch ``batch_id``'s in-progress files."""
    return f"{OUTPUT_RECORDS_DIR}/pending/{sink_id}/{batch_id}"


def manifest_dir(sink_id: str) -> str:
    """Folder (relative to ``<out>``) of this sink's manifests."""
    return f"{OUTPUT_RECORDS_DIR}/manifests/{sink_id}"


def final_name(sink_id: str, batch_id: int, partition: int, n: int, ext: str) -> str:
    """Deterministic committed file name: a re-run can only ever produce the same name."""
    return f"part-{batch_id:010d}-{partition:05d}-{n:05d}-{sink_id}{ext}"
