"""The file source: a directory of Parquet, CSV, JSON-lines or text files, read as a stream.

Where positions live
--------------------
The source does not know Spark's checkpoint location, so it keeps its own
durable **discovered-file log** (:mod:`firesteel.files.source.log`), by
default in ``<path>/_firesteel/source-<digest>/`` (hidden from listings and
from Spark/pyarrow readers by its ``_`` prefix; the digest covers format,
``files.pattern`` and ``recursive``, so sources with different options never
share a log). ``log.path`` moves it, e.g. when the input folder is read-only.
An offset is ``{"log": "<digest>-<log id>", "index": n}``: "the first n files
of the log". The log id is random, made with the log, so a checkpoint whose
log was deleted and rebuilt (in another order) fails with a clear error
instead of reading other files at the same positions.
Listing appends files not yet in the log, ordered by (mtime, path); the log is
append-only, so a range ``[start, end)`` always names the same files.

Per micro-batch (driver unless noted):

1. :meth:`FilesSource.latest_offset` lists the folder, appends new files to the
   log, and admits files from ``start`` up to ``max.files.per.batch`` and
   ``max.bytes.per.batch`` (both apply; a batch holds at least one file).
2. :meth:`FilesSource.partitions` groups consecutive files, a few per Spark
   partition, deterministically.
3. :meth:`FilesSource.read` (executor) checks each file's size and mtime
   against the log (:class:`~firesteel.core.errors.SourceChangedError` if they
   differ or the file is gone) and yields Arrow record batches.
4. :meth:`FilesSource.commit` archives or deletes (``cleanup``) the files below
   ``end``; Spark calls it only after the batch is committed, and it is
   idempotent.

Bad input
---------
``errors=fail`` raises :class:`~firesteel.core.errors.RecordError` naming file
and line. ``skip`` and ``quarantine`` log each bad record and count it; each
partition writes its counts to ``<log>/errors/<first>-<last>.json`` (keyed by
its file range, so a replay replaces rather than adds), and the cumulative
counts appear in query progress as this source's ``latestOffset``
(``{"skipped": ..., "quarantined": ...}``) through ``reportLatestOffset``.
``quarantine`` writes bad lines to ``<quarantine.path>/<first>-<last>.jsonl``
(file, line, reason, raw record) and copies unreadable files whole.

Traps: files must be complete when they appear (write them under a name
starting with ``.`` or ``_`` and rename), since a file whose size or mtime
changes after discovery stops the query with ``SourceChangedError``.
``cleanup`` assumes this query is the folder's only consumer.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from firesteel.core.spi import (
    ConfigError,
    ErrorHandler,
    ErrorPolicy,
    FolderDeadLetter,
    Offset,
    ReadLimit,
    ResettableSource,
    SourceChangedError,
    read_record,
    write_record,
)
from firesteel.files.source.formats import FormatSpec, infer_schema, read_file
from firesteel.files.source.log import LOG_FORMAT_VERSION, FileEntry, FileLog
from firesteel.files.source.options import FilesSourceOptions

logger = logging.getLogger(__name__)

HIDDEN_PREFIXES = ("_", ".")
"""Hadoop convention: such files and folders are not data (markers, temporaries, our logs)."""

PARTITION_TARGET_BYTES = 8 * 1024 * 1024
PARTITION_MAX_FILES = 16


@dataclass(frozen=True)
class FilesPartition:
    """The work of one Spark task: consecutive log entries and how to parse them."""

    root: str
    entries: tuple[FileEntry, ...]
    spec: FormatSpec
    errors: ErrorPolicy
    quarantine_path: str | None
    report_dir: str

    @property
    def key(self) -> str:
        """Deterministic name of this partition's work: its first and last log index."""
        return f"{self.entries[0].index:010d}-{self.entries[-1].index:010d}"


def _log_digest(opts: FilesSourceOptions) -> str:
    config = {"format": opts.format, "pattern": opts.files_pattern, "recursive": opts.recursive}
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]


class FilesSource(ResettableSource):
    """Streams the files of a directory; see the module docs for the protocol."""

    name = "firesteel.files"

    def __init__(self, opts: FilesSourceOptions, schema: pa.Schema | None = None) -> None:
        self.opts = opts
        self.root = Path(opts.path)
        if not self.root.is_dir():
            msg = f"option 'path': {opts.path!r} is not a directory; create it or fix the path"
            raise ConfigError(msg)
        self.digest = _log_digest(opts)
        log_dir = (
            Path(opts.log_path)
            if opts.log_path
            else self.root / "_firesteel" / f"source-{self.digest}"
        )
        config: dict[str, object] = {
            "format": opts.format,
            "pattern": opts.files_pattern,
            "recursive": opts.recursive,
        }
        self.log = FileLog(log_dir, config)
        self.log_id = f"{self.digest}-{self.log.identity}"
        self._user_schema = schema
        self._schema: pa.Schema | None = None
        self._available_now_end: int | None = None
        self._check_archive_path()

    def _check_archive_path(self) -> None:
        if self.opts.cleanup != "archive" or not self.opts.archive_path:
            return
        archive = Path(self.opts.archive_path).resolve()
        root = self.root.resolve()
        if archive == root or (
            root in archive.parents
            and not archive.relative_to(root).parts[0].startswith(HIDDEN_PREFIXES)
        ):
            msg = (
                f"option 'archive.path': {archive} is inside the source folder, so archived "
                "files would be read again; use a folder outside it (or one starting with '_')"
            )
            raise ConfigError(msg)

    # -- schema ---------------------------------------------------------------

    def schema(self) -> pa.Schema:
        if self._schema is not None:
            return self._schema
        if self._user_schema is not None:
            self._schema = self._user_schema
        elif self.opts.format == "text":
            self._schema = pa.schema([("value", pa.string())])
        else:
            self._schema = self.log.load_schema() or self._infer_schema()
        if self.opts.format == "text" and (
            len(self._schema) != 1 or not pa.types.is_string(self._schema[0].type)
        ):
            msg = f"format 'text' reads one string column; the schema given is {self._schema}"
            raise ConfigError(msg)
        return self._schema

    def _infer_schema(self) -> pa.Schema:
        self._discover()
        for entry in self.log.entries:
            path = self.root / entry.path
            if path.exists():
                try:
                    inferred = infer_schema(
                        str(path), self.opts.format, self.opts.header, self.opts.delimiter
                    )
                except (pa.ArrowInvalid, OSError) as exc:
                    msg = (
                        f"cannot infer a schema from {path} ({exc}); give one with "
                        ".schema(...) on readStream"
                    )
                    raise ConfigError(msg) from exc
                return self.log.save_schema(inferred)
        msg = (
            f"option 'path': no {self.opts.format} files in {self.root} to infer a schema "
            "from; add one or give the schema with .schema(...) on readStream"
        )
        raise ConfigError(msg)

    # -- discovery ------------------------------------------------------------

    def _matches(self, relative: str) -> bool:
        pattern = self.opts.files_pattern
        if not pattern:
            return True
        target = relative if "/" in pattern else relative.rsplit("/", 1)[-1]
        return fnmatch.fnmatchcase(target, pattern)

    def _list(self) -> list[tuple[str, int, int]]:
        found: list[tuple[str, int, int]] = []
        pending = [self.root]
        while pending:
            folder = pending.pop()
            with os.scandir(folder) as items:
                for item in items:
                    if item.name.startswith(HIDDEN_PREFIXES):
                        continue
                    if item.is_dir(follow_symlinks=False):
                        if self.opts.recursive:
                            pending.append(Path(item.path))
                        continue
                    if not item.is_file():
                        continue
                    relative = Path(item.path).relative_to(self.root).as_posix()
                    if self._matches(relative):
                        stat = item.stat()
                        found.append((relative, stat.st_size, stat.st_mtime_ns))
        return found

    def _discover(self) -> None:
        """List the folder; append new files to the log; fail on files that changed."""
        while True:
            self.log.refresh()
            new = []
            for relative, size, mtime_ns in self._list():
                known = self.log.by_path.get(relative)
                if known is None:
                    new.append((relative, size, mtime_ns))
                elif (known.size, known.mtime_ns) != (size, mtime_ns):
                    msg = (
                        f"file {self.root / relative} changed after it was discovered (log "
                        f"entry {known.index}: size {known.size}, mtime_ns {known.mtime_ns}; "
                        f"now size {size}, mtime_ns {mtime_ns}). firesteel reads each file "
                        "once: write new data to new files, and write files under a name "
                        "starting with '.' or '_' and rename them when complete"
                    )
                    raise SourceChangedError(msg)
            new.sort(key=lambda item: (item[2], item[0]))
            if self.log.append(new):
                return

    # -- offsets --------------------------------------------------------------

    def _index(self, offset: Offset) -> int:
        log = str(offset.get("log", self.log_id))
        if log == self.digest:
            # Written before logs had ids: nothing to compare, as before.
            return int(offset.get("index", 0))
        if log.split("-", maxsplit=1)[0] == self.digest and log != self.log_id:
            msg = (
                f"the checkpoint's offset {offset} refers to a discovered-file log that no "
                f"longer exists: the log at {self.log.folder} was deleted and rebuilt (it is "
                f"{self.log_id} now), so its positions would name other files. Restore the "
                "log folder, or start a new checkpoint to read the folder from the beginning"
            )
            raise SourceChangedError(msg)
        if log != self.log_id:
            msg = (
                f"the checkpoint's offset {offset} belongs to a file source with other "
                f"options (log {log}, this one is {self.digest}); format, files.pattern and "
                "recursive cannot change for an existing checkpoint"
            )
            raise ConfigError(msg)
        return int(offset.get("index", 0))

    def initial_offset(self) -> Offset:
        return {"log": self.log_id, "index": 0}

    def default_limit(self) -> ReadLimit:
        return ReadLimit(
            max_files=self.opts.max_files_per_batch, max_bytes=self.opts.max_bytes_per_batch
        )

    def prepare_available_now(self) -> None:
        self._discover()
        self._available_now_end = len(self.log)
        logger.info("firesteel.files: available-now run ends at log index %d", len(self.log))

    def latest_offset(self, start: Offset, limit: ReadLimit) -> Offset:
        begin = self._index(start)
        if self._available_now_end is None:
            self._discover()
            stop = len(self.log)
        else:
            self.log.refresh()
            stop = self._available_now_end
        end = begin
        size = 0
        while end < stop:
            entry = self.log.entries[end]
            count = end - begin
            if count > 0 and limit.max_files is not None and count >= limit.max_files:
                break
            if count > 0 and limit.max_bytes is not None and size + entry.size > limit.max_bytes:
                break
            size += entry.size
            end += 1
        if end == begin:
            return start
        return {"log": self.log_id, "index": end}

    def partitions(self, start: Offset, end: Offset) -> Sequence[FilesPartition]:
        begin, stop = self._index(start), self._index(end)
        if stop > len(self.log):
            self.log.refresh()
        if stop > len(self.log):
            msg = (
                f"offset {end} points past the discovered-file log at {self.log.folder} "
                f"({len(self.log)} entries): the log was deleted or replaced; restore it or "
                "start a new checkpoint"
            )
            raise SourceChangedError(msg)
        spec = FormatSpec(self.opts.format, self.schema(), self.opts.header, self.opts.delimiter)
        groups: list[list[FileEntry]] = []
        size = 0
        for entry in self.log.entries[begin:stop]:
            if (
                not groups
                or size >= PARTITION_TARGET_BYTES
                or len(groups[-1]) >= PARTITION_MAX_FILES
            ):
                groups.append([])
                size = 0
            groups[-1].append(entry)
            size += entry.size
        return [
            FilesPartition(
                root=str(self.root),
                entries=tuple(group),
                spec=spec,
                errors=self.opts.errors,
                quarantine_path=self.opts.quarantine_path,
                report_dir=str(self.log.folder / "errors"),
            )
            for group in groups
        ]

    # -- executor side --------------------------------------------------------

    def read(self, partition: FilesPartition) -> Iterator[pa.RecordBatch]:
        dead_letter = (
            FolderDeadLetter(partition.quarantine_path) if partition.quarantine_path else None
        )
        handler = ErrorHandler(
            partition.errors,
            partition.key,
            dead_letter if partition.errors is ErrorPolicy.QUARANTINE else None,
        )
        root = Path(partition.root)
        for entry in partition.entries:
            path = root / entry.path
            _check_unchanged(path, entry)
            before = handler.whole_units
            yield from read_file(str(path), str(path), partition.spec, handler)
            _check_unchanged(path, entry)
            if (
                dead_letter is not None
                and partition.errors is ErrorPolicy.QUARANTINE
                and handler.whole_units > before
            ):
                dead_letter.copy_file(f"{entry.index:010d}-{path.name}", str(path))
        handler.close()
        if handler.skipped or handler.quarantined:
            write_record(
                Path(partition.report_dir) / f"{partition.key}.json",
                "source-errors",
                LOG_FORMAT_VERSION,
                {
                    "skipped": handler.skipped,
                    "quarantined": handler.quarantined,
                    "examples": [r.describe() for r in handler.examples],
                },
            )

    # -- progress and cleanup ---------------------------------------------------

    def report_latest_offset(self) -> Offset | None:
        skipped = quarantined = 0
        folder = self.log.folder / "errors"
        if folder.is_dir():
            for report in sorted(folder.glob("*.json")):
                counts = read_record(report, "source-errors", (LOG_FORMAT_VERSION,))
                skipped += int(counts["skipped"])
                quarantined += int(counts["quarantined"])
        return {
            "log": self.digest,
            "discovered": len(self.log),
            "skipped": skipped,
            "quarantined": quarantined,
        }

    def commit(self, end: Offset) -> None:
        if self.opts.cleanup == "none":
            return
        stop = self._index(end)
        begin = self.log.cleaned_up_to()
        if stop <= begin:
            return
        self.log.refresh()
        for entry in self.log.entries[begin:stop]:
            self._clean(entry)
        self.log.set_cleaned_up_to(stop)

    def _clean(self, entry: FileEntry) -> None:
        """Archive or delete one committed file; safe to repeat after a crash."""
        source = self.root / entry.path
        if self.opts.cleanup == "delete":
            source.unlink(missing_ok=True)
            return
        assert self.opts.archive_path is not None
        target = Path(self.opts.archive_path) / entry.path
        if not source.exists():
            return
        if target.exists() and target.stat().st_size == source.stat().st_size:
            source.unlink()
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(source), str(target))


def _check_unchanged(path: Path, entry: FileEntry) -> None:
    try:
        stat = path.stat()
    except FileNotFoundError as exc:
        msg = (
            f"file {path} (log entry {entry.index}) is gone; it was discovered but removed "
            "before its batch committed, so its records cannot be read"
        )
        raise SourceChangedError(msg) from exc
    if (stat.st_size, stat.st_mtime_ns) != (entry.size, entry.mtime_ns):
        msg = (
            f"file {path} changed after it was discovered (size {entry.size} -> "
            f"{stat.st_size}, mtime_ns {entry.mtime_ns} -> {stat.st_mtime_ns}); the batch "
            "that reads it would not be repeatable. Write new data to new files"
        )
        raise SourceChangedError(msg)
