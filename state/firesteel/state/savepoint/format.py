"""The savepoint layout: Parquet files of canonical rows, and a metadata record written last.

::

    <savepoint>/
      <operator>/<id>.parquet     one file per operator, rows of ROWS_SCHEMA
      offsets/<N>                 Spark's offsets log entry of batch N, copied byte for byte
      _savepoint.json             the metadata record (written last)

A savepoint exists only once ``_savepoint.json`` is whole: it is a firesteel
record (kind ``savepoint``, a format version and a SHA-256 of its content) that
names every data file with its size, its SHA-256 and the SHA-256 of each of its
1 MiB blocks. Files without it (a writer killed half-way) are never read; every
reader reads a data file through :meth:`Savepoint.open_file`, which checks its
size and then each block it reads before a byte of it is decoded
(:mod:`firesteel.state.savepoint.checksums`). The block checksums are an
optional field of format 1: an earlier release reads these savepoints (it
ignores them), and a file recorded without them is checked whole.

A row is one entry of one state of one key (:data:`ROWS_SCHEMA`): the key as a
msgpack array of the key columns' values, the value as the state's serializer
wrote it (``msgpack`` unless the state opted into ``pickle``), the user key of a
map entry or the timestamp of a timer as msgpack. List elements are rows in
list order. Rows are ordered by key group, so a task reads only the row groups
of the key groups it owns.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyarrow import fs

from firesteel.core.faults import fault_point
from firesteel.core.spi import CheckpointCorruptError, ConfigError
from firesteel.core.toolkit import Folder, StorageConfig, encode_record
from firesteel.state.keygroups import KeyGroupRange
from firesteel.state.savepoint.checksums import BlockHashingWriter, VerifiedFile, block_digests

logger = logging.getLogger(__name__)

METADATA = "_savepoint.json"
RECORD_KIND = "savepoint"
FORMAT_VERSION = 1
TIMERS = "__timers__"
"""The state name of processing-time timers in rows (user key: the timestamp)."""

BEFORE_METADATA = fault_point(
    "savepoint.before_metadata", "a savepoint's data files are written, its metadata is not"
)

ROWS_SCHEMA = pa.schema(
    [
        pa.field("key_group", pa.int32(), nullable=False),
        pa.field("key", pa.binary(), nullable=False),
        pa.field("state", pa.string(), nullable=False),
        pa.field("user_key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("expires_ms", pa.int64()),
    ]
)
"""One state entry per row (see module docs)."""

_ROW_GROUP = 64 * 1024
_VERIFY_CHUNK = 8 * 1024 * 1024


class SavepointError(ConfigError):
    """A savepoint is missing, incomplete, or does not fit the job restoring from it."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class OperatorSavepoint:
    """One operator's part of a savepoint."""

    savepoint: Savepoint
    name: str
    info: dict[str, Any]

    @property
    def key_columns(self) -> list[str]:
        """The operator's key columns."""
        return list(self.info["key"])

    @property
    def max_parallelism(self) -> int:
        """The operator's number of key groups."""
        return int(self.info["max_parallelism"])

    @property
    def states(self) -> dict[str, dict[str, Any]]:
        """Each state's description (kind, serializer, ...), by name; timers as ``__timers__``."""
        return dict(self.info["states"])

    @property
    def processing_time(self) -> tuple[int, int] | None:
        """``(processing time, Spark's batch time)`` of the batch, as the operator's clock."""
        clock = self.info.get("processing_time")
        return None if clock is None else (int(clock[0]), int(clock[1]))

    def rows(self, key_groups: KeyGroupRange | None = None) -> pa.Table:
        """The rows of ``key_groups`` (default: all), in file order: only the row groups
        whose key groups overlap them are read (every byte checked first)."""
        tables = []
        for file in self.info["files"]:
            with self.savepoint.open_file(file) as source:
                parquet = pq.ParquetFile(source)
                chosen = [
                    index
                    for index in range(parquet.num_row_groups)
                    if key_groups is None
                    or _overlaps(parquet.metadata.row_group(index), key_groups)
                ]
                table = parquet.read_row_groups(chosen, columns=ROWS_SCHEMA.names)
            if key_groups is not None:
                groups = table.column("key_group")
                table = table.filter(
                    pc.and_(
                        pc.greater_equal(groups, key_groups.start),
                        pc.less_equal(groups, key_groups.end),
                    )
                )
            tables.append(table.cast(ROWS_SCHEMA))
        return pa.concat_tables(tables) if tables else ROWS_SCHEMA.empty_table()


def _overlaps(row_group: pq.RowGroupMetaData, key_groups: KeyGroupRange) -> bool:
    """Whether a row group may hold rows of ``key_groups`` (by its key_group statistics)."""
    stats = row_group.column(0).statistics
    if stats is None or not stats.has_min_max:
        return True
    return bool(stats.min <= key_groups.end and stats.max >= key_groups.start)


@dataclass(frozen=True)
class Savepoint:
    """A whole savepoint, opened by :func:`open_savepoint`."""

    location: str
    metadata: dict[str, Any]
    storage: StorageConfig

    @property
    def id(self) -> str:
        """Unique per savepoint written."""
        return str(self.metadata["id"])

    @property
    def batch(self) -> int:
        """The committed batch whose state this is."""
        return int(self.metadata["batch"])

    @property
    def operators(self) -> list[str]:
        """The operators it holds state for."""
        return sorted(self.metadata["operators"])

    @cached_property
    def folder(self) -> Folder:
        """Where its files are."""
        return Folder(self.location, self.storage)

    def operator(self, name: str) -> OperatorSavepoint:
        """Operator ``name``'s part; a :class:`SavepointError` listing the operators it has."""
        info = self.metadata["operators"].get(name)
        if info is None:
            msg = (
                f"savepoint {self.location} has no state of operator '{name}' "
                f"(it holds: {', '.join(self.operators) or 'nothing'})"
            )
            raise SavepointError(msg)
        return OperatorSavepoint(self, name, info)

    def offsets(self) -> bytes | None:
        """Spark's offsets log entry of :attr:`batch` (where a restored job's sources must
        start), or None for a savepoint written from a table."""
        entry = self.metadata.get("offsets")
        if entry is None:
            return None
        with self.open_file(entry) as file:
            return file.read()

    def open_file(self, entry: Mapping[str, Any]) -> VerifiedFile:
        """The data file ``entry`` names, once its size matches the record, read through its
        checksums: the one way a savepoint's files are read."""
        path = self.folder.path(entry["path"])
        info = self.folder.info(entry["path"])
        if info.type != fs.FileType.File or info.size != int(entry["size"]):
            found = "missing" if info.type != fs.FileType.File else f"{info.size} bytes"
            msg = (
                f"savepoint {self.location}: {entry['path']} is {found}, its metadata says "
                f"{entry['size']} bytes; the savepoint was damaged: take a new one"
            )
            raise CheckpointCorruptError(msg)
        return VerifiedFile(self.folder.fs, path, entry, self.location)

    def verify(self) -> None:
        """Check every file, each block and whole, against the metadata record."""
        entries = [f for op in self.metadata["operators"].values() for f in op["files"]]
        if self.metadata.get("offsets") is not None:
            entries.append(self.metadata["offsets"])
        for entry in entries:
            whole = hashlib.sha256()
            with self.open_file(entry) as file:
                while chunk := file.read(_VERIFY_CHUNK):
                    whole.update(chunk)
                if whole.hexdigest() != entry["sha256"]:
                    msg = (
                        f"savepoint {self.location}: {entry['path']} does not match its "
                        "checksum; the savepoint was damaged: take a new one"
                    )
                    raise CheckpointCorruptError(msg)


def open_savepoint(location: str, storage: StorageConfig | None = None) -> Savepoint:
    """The savepoint at ``location`` (a path or URI); a :class:`SavepointError` when it has
    no whole metadata record (never written, or its writer died before finishing)."""
    config = storage or StorageConfig()
    folder = Folder(location, config)
    if folder.info(METADATA).type != fs.FileType.File:
        msg = (
            f"no savepoint at {location}: {METADATA} is missing (never written, or its writer "
            "stopped before finishing; files without it are never read): take the savepoint again"
        )
        raise SavepointError(msg)
    metadata = folder.read_record(METADATA, RECORD_KIND, (FORMAT_VERSION,))
    return Savepoint(location, metadata, config)


@dataclass(frozen=True, kw_only=True)
class OperatorInfo:
    """What a savepoint's metadata records of one operator, beside its files."""

    key_columns: list[str]
    max_parallelism: int
    states: dict[str, dict[str, Any]]
    processing_time: tuple[int, int] | None = None
    written_by: str | None = None


@dataclass(frozen=True, kw_only=True)
class OperatorRows(OperatorInfo):
    """What :func:`write_savepoint` writes for one operator: its record and all its rows."""

    rows: pa.Table


class SavepointWriter:
    """Writes one savepoint at ``target``: each operator's rows streamed into its Parquet
    file (:meth:`write_rows`, any number of row chunks, memory bounded by one row group),
    then the metadata record (:meth:`finish`). A target that already holds a savepoint is
    refused."""

    def __init__(self, target: str, storage: StorageConfig | None = None) -> None:
        self.target = target
        self._config = storage or StorageConfig()
        self._folder = Folder(target, self._config)
        if self._folder.info(METADATA).type != fs.FileType.NotFound:
            msg = (
                f"{target} already holds a savepoint; choose a new target (savepoints are "
                "immutable)"
            )
            raise SavepointError(msg)
        self.id = uuid.uuid4().hex
        self._operators: dict[str, Any] = {}

    def write_rows(self, name: str, chunks: Iterable[pa.Table]) -> dict[str, Any]:
        """Write operator ``name``'s rows (``chunks`` of :data:`ROWS_SCHEMA`, in key group
        order) in row groups of 64k rows; the file's entry for :meth:`describe`."""
        relative = f"{name}/{self.id}.parquet"
        rows = 0
        with self._folder.output(relative) as out:
            sink = BlockHashingWriter(out)
            with pq.ParquetWriter(
                pa.PythonFile(sink, mode="w"), ROWS_SCHEMA, compression="zstd"
            ) as writer:
                pending: list[pa.Table] = []
                held = 0
                for chunk in chunks:
                    pending.append(chunk.cast(ROWS_SCHEMA))
                    held += chunk.num_rows
                    rows += chunk.num_rows
                    if held >= _ROW_GROUP:
                        whole = pa.concat_tables(pending)
                        full = held - held % _ROW_GROUP
                        writer.write_table(whole.slice(0, full), row_group_size=_ROW_GROUP)
                        pending, held = [whole.slice(full)], held - full
                if held:
                    writer.write_table(pa.concat_tables(pending), row_group_size=_ROW_GROUP)
        digest = sink.digest.hexdigest()
        return {
            "path": relative,
            "size": sink.size,
            "sha256": digest,
            "blocks": sink.blocks,
            "rows": rows,
        }

    def describe(self, name: str, info: OperatorInfo, file: dict[str, Any]) -> None:
        """Record operator ``name`` in the metadata, with the file :meth:`write_rows` wrote."""
        self._operators[name] = {
            "key": list(info.key_columns),
            "max_parallelism": info.max_parallelism,
            "states": info.states,
            "processing_time": None if info.processing_time is None else list(info.processing_time),
            "written_by": info.written_by,
            "files": [file],
        }

    def finish(self, *, batch: int, offsets: bytes | None, origin: Mapping[str, Any]) -> Savepoint:
        """Copy ``offsets`` (Spark's offsets log entry of ``batch``; None when the state did
        not come from a query) and write the metadata record: the savepoint exists from here.
        ``origin``: where the state came from, recorded as it is."""
        offsets_entry = (
            None if offsets is None else _write_file(self._folder, f"offsets/{batch}", offsets)
        )
        BEFORE_METADATA.fire(batch)
        metadata = {
            "id": self.id,
            "batch": batch,
            "created_at": dt.datetime.now(dt.timezone.utc).isoformat(),
            "origin": dict(origin),
            "offsets": offsets_entry,
            "operators": self._operators,
        }
        record = encode_record(RECORD_KIND, FORMAT_VERSION, metadata)
        if not self._folder.create(METADATA, record):
            msg = (
                f"{self.target}: another writer finished a savepoint there first; choose a new "
                "target"
            )
            raise SavepointError(msg)
        logger.info(
            "savepoint %s of batch %d written at %s: %s",
            self.id,
            batch,
            self.target,
            json.dumps({n: op["files"][0]["rows"] for n, op in self._operators.items()}),
        )
        return Savepoint(self.target, metadata, self._config)


def _write_file(folder: Folder, relative: str, data: bytes) -> dict[str, Any]:
    folder.write(relative, data)
    return {
        "path": relative,
        "size": len(data),
        "sha256": _sha256(data),
        "blocks": block_digests(data),
    }


def write_savepoint(
    target: str,
    *,
    batch: int,
    operators: Mapping[str, OperatorRows],
    offsets: bytes | None,
    origin: Mapping[str, Any],
    storage: StorageConfig | None = None,
) -> Savepoint:
    """Write a savepoint at ``target`` of rows already in memory (see :class:`SavepointWriter`)."""
    writer = SavepointWriter(target, storage)
    for name, part in operators.items():
        writer.describe(name, part, writer.write_rows(name, [part.rows]))
    return writer.finish(batch=batch, offsets=offsets, origin=origin)
