"""What a source does with input it cannot read: fail, skip with a count, or quarantine.

Every connector that parses input (the file source, the Kafka source) shares
this policy so users configure bad input the same way everywhere:

* ``fail`` (default): raise :class:`~firesteel.core.errors.RecordError` naming
  where the record came from (file and line, topic-partition and offset);
* ``skip``: drop the record, log a warning naming it, and count it;
* ``quarantine``: hand the record to a :class:`DeadLetter` (a folder, local or on an
  object store, or a topic)
  together with where it came from and why it failed, and count it.

Nothing is dropped silently: a skipped record is logged and counted, a
quarantined one is kept. Counts are per :class:`ErrorHandler`, i.e. per unit of
work (one partition of one batch); the connector makes them visible, e.g. in
query progress.

Traps:

* A batch may run twice after a crash, so a dead letter must be keyed by the
  unit of work (:meth:`DeadLetter.open` takes a deterministic key) and replace,
  not append to, what an earlier attempt wrote: a replay must not duplicate
  quarantined records or double the counts.
* Records must be quarantined before the batch's output can commit, so a
  :class:`DeadLetter` writes durably when its :meth:`DeadLetterWriter.close`
  returns.
"""

from __future__ import annotations

import base64
import contextlib
import enum
import json
import logging
import shutil
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, BinaryIO

from pyarrow import NativeFile

from firesteel.core.errors import ConfigError, RecordError
from firesteel.core.folder import Folder
from firesteel.core.storage import StorageConfig

logger = logging.getLogger(__name__)

QUARANTINE_FORMAT_VERSION = 1


class ErrorPolicy(enum.Enum):
    """The value of a connector's ``errors`` option."""

    FAIL = "fail"
    """Stop the query with a :class:`RecordError` naming the record (default)."""
    SKIP = "skip"
    """Drop the record, log a warning naming it, count it."""
    QUARANTINE = "quarantine"
    """Keep the record in a dead-letter destination with where and why, count it."""


@dataclass(frozen=True)
class BadRecord:
    """One record (or a whole unreadable unit, e.g. a corrupt file) that failed to parse.

    ``location`` names the container (a file path, ``topic[partition]``);
    ``position`` the record in it (1-based line number, an offset) or ``None``
    when the whole container is bad, and ``unit`` what ``position`` counts
    (``line``, ``offset``); ``raw`` the record's bytes when known.
    """

    location: str
    position: int | None
    reason: str
    raw: bytes | None = None
    unit: str = "line"

    def describe(self) -> str:
        """``file.csv line 7: reason`` style text for messages and logs."""
        if self.position is None:
            return f"{self.location}: {self.reason}"
        return f"{self.location} {self.unit} {self.position}: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        """The JSON form a dead letter stores; raw bytes as UTF-8 text, else base64."""
        body: dict[str, Any] = {
            "version": QUARANTINE_FORMAT_VERSION,
            "location": self.location,
            "position": self.position,
            "unit": self.unit,
            "reason": self.reason,
        }
        if self.raw is not None:
            try:
                body["record"] = self.raw.decode("utf-8")
            except UnicodeDecodeError:
                body["record_base64"] = base64.b64encode(self.raw).decode("ascii")
        return body


class DeadLetterWriter(ABC):
    """Where the bad records of one unit of work go; durable once :meth:`close` returns."""

    @abstractmethod
    def add(self, record: BadRecord) -> None:
        """Keep ``record``."""

    @abstractmethod
    def close(self) -> None:
        """Make everything added durable (replacing an earlier attempt's output)."""


class DeadLetter(ABC):
    """A dead-letter destination; :meth:`open` is keyed by a deterministic unit of work."""

    @abstractmethod
    def open(self, key: str) -> DeadLetterWriter:
        """A writer for the unit of work ``key`` (same key on a replay)."""


class _FolderWriter(DeadLetterWriter):
    """Streams records to the key's file; :meth:`close` makes it durable in place of an
    earlier attempt's (the durability policy of :mod:`firesteel.core.durable`)."""

    def __init__(self, folder: Folder, key: str) -> None:
        self.folder = folder
        self.key = key
        self.pending: contextlib.ExitStack | None = None
        self.out: NativeFile | None = None

    def add(self, record: BadRecord) -> None:
        if self.out is None:
            self.pending = contextlib.ExitStack()
            self.out = self.pending.enter_context(self.folder.output(f"{self.key}.jsonl"))
        self.out.write((json.dumps(record.to_json()) + "\n").encode("utf-8"))

    def close(self) -> None:
        if self.pending is None:
            return
        self.pending.close()
        self.pending = None
        self.out = None


class FolderDeadLetter(DeadLetter):
    """Quarantine into a folder: one JSON-lines file per unit of work.

    ``folder`` is a local path or an object-store URI (``s3a://bucket/quarantine``,
    reached with ``config``, see :mod:`firesteel.core.storage`). Each line
    holds ``location``, ``position`` (line), ``reason`` and the raw ``record``.
    The file ``<folder>/<key>.jsonl`` replaces an earlier attempt's whole
    (locally written to a temporary name and renamed, on an object store one
    upload), so a replay never duplicates a record.
    """

    def __init__(self, folder: str, config: StorageConfig | None = None) -> None:
        self.folder = Folder(folder, config)

    def open(self, key: str) -> DeadLetterWriter:
        return _FolderWriter(self.folder, key)

    def copy_file(self, key: str, source: BinaryIO) -> str:
        """Quarantine a whole unreadable file, read from ``source``, as ``<folder>/<key>``
        (replaces; returns where it went)."""
        with self.folder.output(key) as out:
            shutil.copyfileobj(source, out)
        return self.folder.uri_of(key)


class ErrorHandler:
    """Applies an :class:`ErrorPolicy` to the bad records of one unit of work.

    Call :meth:`handle` for each bad record, then :meth:`close` once the unit
    is done (before its output can commit). ``skipped`` and ``quarantined``
    count what was handled, ``whole_units`` the records that stood for a whole
    unreadable container (no position), and ``examples`` keeps the first
    :attr:`MAX_EXAMPLES` for reports.
    """

    MAX_EXAMPLES = 100

    def __init__(
        self,
        policy: ErrorPolicy,
        key: str,
        dead_letter: DeadLetter | None = None,
    ) -> None:
        if policy is ErrorPolicy.QUARANTINE and dead_letter is None:
            msg = "error policy 'quarantine' needs a dead-letter destination"
            raise ConfigError(msg)
        self.policy = policy
        self.key = key
        self.writer = dead_letter.open(key) if dead_letter is not None else None
        self.skipped = 0
        self.quarantined = 0
        self.whole_units = 0
        self.examples: list[BadRecord] = []

    def handle(self, record: BadRecord) -> None:
        """Fail, skip or quarantine ``record`` according to the policy."""
        if self.policy is ErrorPolicy.FAIL:
            msg = (
                f"bad input at {record.describe()}. Fix or remove it, or set option "
                "'errors' to 'skip' or 'quarantine'"
            )
            raise RecordError(msg)
        if len(self.examples) < self.MAX_EXAMPLES:
            self.examples.append(record)
        if record.position is None:
            self.whole_units += 1
        if self.policy is ErrorPolicy.SKIP:
            self.skipped += 1
            logger.warning("skipping bad input at %s", record.describe())
            return
        assert self.writer is not None
        self.writer.add(record)
        self.quarantined += 1
        logger.warning("quarantining bad input at %s", record.describe())

    def close(self) -> None:
        """Make quarantined records durable."""
        if self.writer is not None:
            self.writer.close()
