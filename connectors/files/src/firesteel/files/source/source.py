"""The file source: a directory of Parquet, CSV, JSON-lines or text files, read as a stream.

The directory is a local path or a prefix on an object store
(``s3a://bucket/prefix``, ``gs://``, ``abfss://``), reached with the source's
``fs.*`` options over the session's ``spark.hadoop.fs.*`` settings; the
discovered-file log lives beside the files unless ``log.path`` moves it.

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
   Requests per batch on an object store: the listing is one LIST request
   (with a delimiter) per 1,000 entries of the prefix, plus one per visible
   sub-prefix when ``recursive``; ``_``/``.`` prefixes (the log among them)
   are never listed. So the bound is ``ceil(entries / 1000)`` per listed
   prefix: it stays flat when ``cleanup`` is ``delete`` or ``archive`` (the
   prefix holds the files not yet consumed) and grows by one request per
   1,000 files kept with ``cleanup=none``. The log adds a constant few: an
   existence check per refresh, and a create and a read of one segment when
   the round found new files; it is never listed.
2. :meth:`FilesSource.partitions` groups consecutive files, a few per Spark
   partition, deterministically: the plan of a logged batch ``[start, end)``
   is a function of the log alone, never of a new listing.
3. :meth:`FilesSource.read` (executor) checks each file's size and mtime
   against the log (:class:`~firesteel.core.errors.SourceChangedError` if they
   differ or the file is gone) and yields Arrow record batches.
4. :meth:`FilesSource.commit` archives or deletes (``cleanup``) the files below
   ``end``; Spark calls it only after the batch is committed, and it is
   idempotent. Archiving is a rename locally and a server-side copy then
   delete within one object store (across stores a streamed copy).

Bad input
---------
``errors=fail`` raises :class:`~firesteel.core.errors.RecordError` naming file
and line. ``skip`` and ``quarantine`` log each bad record and count it; each
partition writes its counts to ``<log>/errors/<first>-<last>.json`` (keyed by
its file range, so a replay replaces rather than adds), and the cumulative
counts appear in query progress as this source's ``latestOffset``
(``{"skipped": ..., "quarantined": ...}``) through ``reportLatestOffset``.
``quarantine`` writes bad lines to ``<quarantine.path>/<log id>-<first>-<last>.jsonl``
(file, line, reason, raw record) and copies unreadable files whole (as
``<log id>-<index>-<name>``); the log id (options digest and the log's
identity) keeps two sources quarantining into one folder from replacing
each other's files;
``quarantine.path`` is a local folder or an object-store URI, reached with the
same ``fs.*`` settings as ``path``.

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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyarrow import fs

from firesteel.core.spi import ConfigError, Offset, ReadLimit, ResettableSource, SourceChangedError
from firesteel.core.toolkit import (
    ErrorHandler,
    ErrorPolicy,
    Folder,
    FolderDeadLetter,
    StorageConfig,
    canonical,
    check_location,
)
from firesteel.files.sink.paths import OUTPUT_RECORDS_DIR
from firesteel.files.source.formats import FormatSpec, infer_schema, read_file
from firesteel.files.source.log import LOG_FORMAT_VERSION, FileEntry, FileLog
from firesteel.files.source.options import FilesSourceOptions
from firesteel.sources.spi import BadRecordCounts

logger = logging.getLogger(__name__)

HIDDEN_PREFIXES = ("_", ".")
"""Hadoop convention: such files and folders are not data (markers, temporaries, our logs)."""

PARTITION_TARGET_BYTES = 8 * 1024 * 1024
PARTITION_MAX_FILES = 16


@dataclass(frozen=True)
class FilesPartition:
    """The work of one Spark task: consecutive log entries and how to parse them."""

    root: Folder
    entries: tuple[FileEntry, ...]
    spec: FormatSpec
    errors: ErrorPolicy
    quarantine_path: str | None
    log: Folder
    log_id: str
    """The source's log (options digest and identity): names its dead letters apart from
    those of another source quarantining into the same folder."""

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

    def __init__(
        self,
        opts: FilesSourceOptions,
        schema: pa.Schema | None = None,
        storage: StorageConfig | None = None,
    ) -> None:
        self.opts = opts
        self.storage = storage or StorageConfig()
        self.root = Folder(opts.path, self.storage)
        if self.root.object_store:
            check_location(self.root.location, self.storage)
        elif self.root.info("").type != fs.FileType.Directory:
            msg = f"option 'path': {opts.path!r} is not a directory; create it or fix the path"
            raise ConfigError(msg)
        self.digest = _log_digest(opts)
        log_dir = Folder(
            opts.log_path or self.root.uri_of(f"{OUTPUT_RECORDS_DIR}/source-{self.digest}"),
            self.storage,
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
        archive = canonical(self.opts.archive_path)
        root = canonical(self.opts.path)
        inside = archive.startswith(f"{root}/")
        if archive == root or (inside and not archive[len(root) + 1 :].startswith(HIDDEN_PREFIXES)):
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
            if self.root.exists(entry.path):
                try:
                    inferred = infer_schema(
                        self.root.fs,
                        self.root.path(entry.path),
                        self.opts.format,
                        self.opts.header,
                        self.opts.delimiter,
                    )
                except (pa.ArrowInvalid, OSError) as exc:
                    msg = (
                        f"cannot infer a schema from {self.root.uri_of(entry.path)} ({exc}); "
                        "give one with .schema(...) on readStream"
                    )
                    raise ConfigError(msg) from exc
                return self.log.save_schema(inferred)
        msg = (
            f"option 'path': no {self.opts.format} files in {self.root.uri} to infer a schema "
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
        """(relative path, size, mtime_ns) of every visible file: one listing per folder,
        hidden folders (``_firesteel/`` among them) never entered."""
        found: list[tuple[str, int, int]] = []
        pending = [""]
        while pending:
            folder = pending.pop()
            for item in self.root.entries(folder):
                if item.base_name.startswith(HIDDEN_PREFIXES):
                    continue
                relative = f"{folder}/{item.base_name}" if folder else item.base_name
                if item.type == fs.FileType.Directory:
                    if self.opts.recursive:
                        pending.append(relative)
                    continue
                if item.type == fs.FileType.File and self._matches(relative):
                    found.append((relative, int(item.size or 0), int(item.mtime_ns or 0)))
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
                        f"file {self.root.uri_of(relative)} changed after it was discovered (log "
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
                f"longer exists: the log at {self.log.folder.uri} was deleted and rebuilt (it is "
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
                f"offset {end} points past the discovered-file log at {self.log.folder.uri} "
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
                root=self.root,
                entries=tuple(group),
                spec=spec,
                errors=self.opts.errors,
                quarantine_path=self.opts.quarantine_path,
                log=self.log.folder,
                log_id=self.log_id,
            )
            for group in groups
        ]

    # -- executor side --------------------------------------------------------

    def read(self, partition: FilesPartition) -> Iterator[pa.RecordBatch]:
        dead_letter = (
            FolderDeadLetter(partition.quarantine_path, partition.root.config)
            if partition.quarantine_path
            else None
        )
        handler = ErrorHandler(
            partition.errors,
            f"{partition.log_id}-{partition.key}",
            dead_letter if partition.errors is ErrorPolicy.QUARANTINE else None,
        )
        root = partition.root
        for entry in partition.entries:
            where = root.uri_of(entry.path)
            _check_unchanged(root, entry)
            before = handler.whole_units
            yield from read_file(root.fs, root.path(entry.path), where, partition.spec, handler)
            _check_unchanged(root, entry)
            if (
                dead_letter is not None
                and partition.errors is ErrorPolicy.QUARANTINE
                and handler.whole_units > before
            ):
                name = entry.path.rsplit("/", 1)[-1]
                with root.open_input(entry.path) as original:
                    dead_letter.copy_file(f"{partition.log_id}-{entry.index:010d}-{name}", original)
        handler.close()
        if handler.skipped or handler.quarantined:
            _bad_records(partition.log).record(
                partition.key,
                handler.skipped,
                handler.quarantined,
                [r.describe() for r in handler.examples],
            )

    # -- progress and cleanup ---------------------------------------------------

    def report_latest_offset(self) -> Offset | None:
        return {
            "log": self.digest,
            "discovered": len(self.log),
            **_bad_records(self.log.folder).total(),
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
        if self.opts.cleanup == "delete":
            self.root.delete(entry.path)
            return
        assert self.opts.archive_path is not None
        archive = Folder(self.opts.archive_path, self.storage)
        source = self.root.info(entry.path)
        if source.type != fs.FileType.File:
            return
        target = archive.info(entry.path)
        if target.type == fs.FileType.File and target.size == source.size:
            # A crash came between an object store's copy and its delete.
            self.root.delete(entry.path)
            return
        archive.receive(self.root, entry.path)


def _check_unchanged(root: Folder, entry: FileEntry) -> None:
    info = root.info(entry.path)
    if info.type != fs.FileType.File:
        msg = (
            f"file {root.uri_of(entry.path)} (log entry {entry.index}) is gone; it was "
            "discovered but removed before its batch committed, so its records cannot be read"
        )
        raise SourceChangedError(msg)
    if (info.size, info.mtime_ns) != (entry.size, entry.mtime_ns):
        msg = (
            f"file {root.uri_of(entry.path)} changed after it was discovered (size "
            f"{entry.size} -> {info.size}, mtime_ns {entry.mtime_ns} -> {info.mtime_ns}); the "
            "batch that reads it would not be repeatable. Write new data to new files"
        )
        raise SourceChangedError(msg)


def _bad_records(log: Folder) -> BadRecordCounts:
    """The bad-record counts kept in the discovered-file log ``log``."""
    return BadRecordCounts(log, "source-errors", LOG_FORMAT_VERSION)
