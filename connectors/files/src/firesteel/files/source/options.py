"""The options of the file source (``spark.readStream.format("firesteel.files")``).

Spark hands options over as flat, case-insensitive strings;
:func:`firesteel.core.options.parse_options` turns them into this class and
refuses unknown or misspelled keys, listing the valid ones.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from firesteel.core.spi import ConfigError, check_ranges, option
from firesteel.core.toolkit import ErrorPolicy, require_absolute
from firesteel.files.path import path_option

SourceFormat = Literal["parquet", "csv", "json", "text"]


@dataclasses.dataclass(frozen=True)
class FilesSourceOptions:
    """Options of ``spark.readStream.format("firesteel.files")``."""

    path: str = path_option("the directory to read (or pass it to load())")
    format: SourceFormat = option("parquet", doc="file format: parquet, csv, json (lines), text")
    max_files_per_batch: int | None = option(
        None,
        name="max.files.per.batch",
        doc="admission control: at most this many files a batch",
        min=1,
    )
    max_bytes_per_batch: int | None = option(
        None,
        name="max.bytes.per.batch",
        doc="admission control: at most this many bytes a batch (at least one file)",
        min=1,
    )
    cleanup: Literal["none", "archive", "delete"] = option(
        "none", doc="after a batch commits: none, archive (move to archive.path) or delete"
    )
    archive_path: str | None = option(
        None, name="archive.path", doc="where cleanup=archive moves committed files"
    )
    errors: ErrorPolicy = option(
        ErrorPolicy.FAIL, doc="bad input: fail (default), skip (count it), quarantine"
    )
    quarantine_path: str | None = option(
        None, name="quarantine.path", doc="where errors=quarantine keeps bad lines and files"
    )
    files_pattern: str | None = option(
        None, name="files.pattern", doc="glob the file name (or relative path) must match"
    )
    recursive: bool = option(False, doc="also read files in sub-directories")
    header: bool = option(True, doc="csv: the first line names the columns")
    delimiter: str = option(",", doc="csv: the field delimiter")
    log_path: str | None = option(
        None,
        name="log.path",
        doc="folder of the durable discovered-file log "
        "(default: <path>/_firesteel/source-<digest of format, pattern, recursive>)",
    )

    passthrough: dict[str, str] = dataclasses.field(default_factory=dict)
    """The ``fs.*`` options: settings of the store ``path`` is on (Hadoop's names)."""

    def __post_init__(self) -> None:
        for key in ("path", "archive_path", "log_path", "quarantine_path"):
            require_absolute(key.replace("_", "."), getattr(self, key))
        check_ranges(self)
        if self.cleanup == "archive" and not self.archive_path:
            msg = "option 'cleanup' is 'archive' but option 'archive.path' is not set; set it"
            raise ConfigError(msg)
        if self.errors is ErrorPolicy.QUARANTINE and not self.quarantine_path:
            msg = "option 'errors' is 'quarantine' but option 'quarantine.path' is not set; set it"
            raise ConfigError(msg)
        if len(self.delimiter) != 1:
            msg = f"option 'delimiter' must be one character, got {self.delimiter!r}"
            raise ConfigError(msg)
