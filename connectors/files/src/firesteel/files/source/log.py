"""The discovered-file log: the durable, append-only order in which the source saw its files.

Offsets of the file source are indexes into this log (``{"index": n}`` means
"the first n discovered files"), so offsets stay small however many files
there are, and a range ``[start, end)`` always names the same files.

Layout of the log folder::

    config.json                 what the log was made for (format, pattern, recursive)
    segments/<seq>.json         entries discovered in one listing round, immutable
    schema.json                 the inferred schema (Arrow IPC, base64), once inferred
    errors/<first>-<last>.json  skip/quarantine counts of one partition (see source)
    cleanup.json                how far cleanup (archive/delete) has gone

A segment is published with an exclusive create (hard link; on S3 a
conditional PUT; on other object stores a HEAD then one PUT, see
:func:`firesteel.core.durable.create_record`), so two drivers appending at once
locally or on S3 cannot both claim a sequence number:
the loser re-reads and retries. Segments are never rewritten, which is what
keeps old offsets meaningful. Nothing here lists the folder: the next segment
is found by its number (one existence check per refresh, one GET per new
segment), so the cost per batch does not grow with the log.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from firesteel.core.spi import ConfigError
from firesteel.core.toolkit import Folder, check_location, create_record, read_record, write_record

LOG_FORMAT_VERSION = 1


@dataclass(frozen=True)
class FileEntry:
    """One discovered file: its path relative to the source root, size and mtime (ns)."""

    index: int
    path: str
    size: int
    mtime_ns: int


class FileLog:
    """Driver-side view of one log folder; :meth:`refresh` reads segments written since."""

    def __init__(self, folder: Folder, config: dict[str, object]) -> None:
        self.folder = folder
        self.entries: list[FileEntry] = []
        self.by_path: dict[str, FileEntry] = {}
        self._next_segment = 0
        if folder.object_store:
            check_location(folder.location, folder.config)
        else:
            try:
                folder.fs.create_dir(folder.path("segments"), recursive=True)
            except OSError as exc:
                msg = (
                    f"option 'log.path': cannot create the discovered-file log at {folder.uri} "
                    f"({exc}); point 'log.path' at a writable folder"
                )
                raise ConfigError(msg) from exc
        self._check_config(config)
        self.identity = self._identity()
        self.refresh()

    def _create(self, key: str, kind: str, content: Any) -> bool:
        return create_record(
            self.folder.uri_of(key), kind, LOG_FORMAT_VERSION, content, self.folder.config
        )

    def _read(self, key: str, kind: str) -> Any:
        return read_record(self.folder.uri_of(key), kind, (LOG_FORMAT_VERSION,), self.folder.config)

    def _check_config(self, config: dict[str, object]) -> None:
        if not self.folder.exists("config.json"):
            self._create("config.json", "source-log-config", config)
        stored = self._read("config.json", "source-log-config")
        if stored != config:
            msg = (
                f"option 'log.path': the log at {self.folder.uri} was made for {stored}, not "
                f"{config}; use another 'log.path' for a source with different options"
            )
            raise ConfigError(msg)

    def _identity(self) -> str:
        """A random id made with the log: a deleted and rebuilt log gets another one."""
        if not self.folder.exists("identity.json"):
            self._create("identity.json", "source-log-identity", uuid.uuid4().hex[:12])
        return str(self._read("identity.json", "source-log-identity"))

    @staticmethod
    def _segment(seq: int) -> str:
        return f"segments/{seq:010d}.json"

    def refresh(self) -> None:
        """Read segments appended since the last call (by this or another driver)."""
        while self.folder.exists(self._segment(self._next_segment)):
            rows = self._read(self._segment(self._next_segment), "source-log")
            for path, size, mtime_ns in rows:
                entry = FileEntry(len(self.entries), path, size, mtime_ns)
                self.entries.append(entry)
                self.by_path[path] = entry
            self._next_segment += 1

    def append(self, files: list[tuple[str, int, int]]) -> bool:
        """Publish ``files`` (path, size, mtime_ns) as the next segment; False if raced."""
        if not files:
            return True
        seq = self._next_segment
        if not self._create(self._segment(seq), "source-log", files):
            self.refresh()
            return False
        self.refresh()
        return True

    def __len__(self) -> int:
        return len(self.entries)

    def load_schema(self) -> pa.Schema | None:
        """The schema inferred when the log was new, if any."""
        if not self.folder.exists("schema.json"):
            return None
        encoded = self._read("schema.json", "source-schema")
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(encoded)))

    def save_schema(self, schema: pa.Schema) -> pa.Schema:
        """Keep the first inferred schema; returns the one kept (another driver may have won)."""
        encoded = base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")
        self._create("schema.json", "source-schema", encoded)
        kept = self.load_schema()
        assert kept is not None
        return kept

    def cleaned_up_to(self) -> int:
        """Files below this index have been archived or deleted already."""
        if not self.folder.exists("cleanup.json"):
            return 0
        return int(self._read("cleanup.json", "source-cleanup"))

    def set_cleaned_up_to(self, index: int) -> None:
        """Record cleanup progress (after the files are gone)."""
        write_record(
            self.folder.uri_of("cleanup.json"),
            "source-cleanup",
            LOG_FORMAT_VERSION,
            index,
            self.folder.config,
        )
