"""The options of the transactional file sink (``df.writeStream.format("firesteel.files")``).

Spark hands options over as flat, case-insensitive strings;
:func:`firesteel.core.options.parse_options` turns them into this class and
refuses unknown or misspelled keys, listing the valid ones.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from firesteel.core.spi import SinkOptions, check_ranges, option
from firesteel.core.toolkit import require_absolute
from firesteel.files.path import path_option

SinkFormat = Literal["parquet", "json"]
MAX_ROLL_SIZE_BYTES = 5 * 1024**3
"""Publishing a file on an object store is one server-side copy, which S3 caps at 5 GiB."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class FilesSinkOptions(SinkOptions):
    """Options of ``df.writeStream.format("firesteel.files")`` (plus ``guarantee``, ``sink.id``).

    The default sink id follows ``path`` (see
    :func:`~firesteel.core.spark.datasource.default_sink_id`); ``sink.new.stream``
    is the user's word that a new checkpoint over committed output is a new stream.
    """

    path: str = path_option("the output directory")
    format: SinkFormat = option("parquet", doc="file format: parquet (default) or json (lines)")
    bucket_by: str | None = option(
        None,
        name="bucket.by",
        doc="comma-separated columns; rows go to Hive-style sub-folders col=value",
    )
    roll_size_bytes: int = option(
        128 * 1024 * 1024,
        name="roll.size.bytes",
        doc="start a new file once the current one exceeds this many bytes (at most 5 GiB, "
        "the largest object S3 copies in one request)",
        min=1,
        max=MAX_ROLL_SIZE_BYTES,
    )
    sink_new_stream: bool = option(
        False,
        name="sink.new.stream",
        doc="true: this checkpoint starts a new stream into an output that already holds "
        "another query's batches, and writes them again (default: such a start is refused); "
        "keep it set for the life of this checkpoint",
    )
    compression: str | None = option(
        None, doc="parquet codec (default snappy) or json stream codec (default none, e.g. gzip)"
    )

    passthrough: dict[str, str] = dataclasses.field(default_factory=dict)
    """The ``fs.*`` options: settings of the store ``path`` is on (Hadoop's names)."""

    @property
    def bucket_columns(self) -> tuple[str, ...]:
        """The ``bucket.by`` columns, in order."""
        if not self.bucket_by:
            return ()
        return tuple(c.strip() for c in self.bucket_by.split(",") if c.strip())

    def __post_init__(self) -> None:
        require_absolute("path", self.path)
        check_ranges(self)
