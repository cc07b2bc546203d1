"""A source's own records beside Spark's checkpoint: its pinned start, its bad-record counts.

PySpark never tells a Python source where its query's checkpoint is
(``PythonScan.toMicroBatchStream`` drops the metadata path Spark's own sources
get), so a source that needs one takes it as option ``checkpointLocation``, the
value given to ``writeStream``, and keeps under
``<checkpoint>/firesteel/<source>-source-<digest of the subscription>/``:

* ``start-<digest of the start options>.json``: a start that depends on the
  moment it is resolved (Kafka's ``latest``, or a timestamp that falls back to
  latest), written durably before the source hands it to Spark. A run that dies
  at any later moment, before or after Spark wrote ``offsets/0``, restarts from
  this start, never from a new ``latest``. Changed start options are a new
  record, resolved anew (Spark ignores them once ``offsets/0`` exists);
* ``errors/<range>.json``: how many bad records the task reading that range
  skipped or quarantined (:class:`~firesteel.sources.bad_records.BadRecordCounts`);
* ``progress.json``: what the source knew when it last planned a batch (for Kafka:
  the committed positions, the log ends and the lag between them), replaced each
  time, read by ``firesteel status`` and the Prometheus exporter.

Records go through a :class:`~firesteel.core.folder.Folder` on any store
(``hdfs://``, ``s3://``...), like Spark's own checkpoint; where the folder is,
:mod:`firesteel.core.layout` says.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from firesteel.core.metrics.sources import PROGRESS, errors_kind, progress_kind
from firesteel.core.spi import ConfigError, Offset
from firesteel.core.toolkit import Folder, encode_record, layout, read_query_id
from firesteel.sources.bad_records import BadRecordCounts

FORMAT_VERSION = 1


@dataclass(frozen=True)
class SourceFolder:
    """One source's folder in its query's checkpoint. Picklable: tasks write counts."""

    source: str
    """The connector's name (``kafka``): names the folder, its records and its errors."""
    checkpoint: str
    """The ``checkpointLocation`` option, as the user spelled it (any spelling works)."""
    subscription: str
    """What the source reads (``subscribe`` or ``subscribePattern``); names the folder."""

    @functools.cached_property
    def folder(self) -> Folder:
        """The folder itself (resolved on first use, in each process)."""
        return Folder(layout.source(self.checkpoint, self.source, self.subscription))

    def check(self) -> None:
        """Refuse a location where Spark has not started a query (driver side).

        Spark writes ``<checkpoint>/metadata`` when a query starts, before it
        asks any source for an offset, so a missing file means the option names
        another folder than the query's checkpoint.
        """
        if read_query_id(self.checkpoint) is None:
            msg = (
                f"firesteel.{self.source}: option 'checkpointLocation' is {self.checkpoint}, "
                "where Spark has no query metadata: give the source the query's own checkpoint "
                "location, the value of writeStream's option 'checkpointLocation'"
            )
            raise ConfigError(msg)

    def _start_name(self, start_options: Any) -> str:
        return f"start-{layout.digest(start_options)}.json"

    def pinned_start(self, start_options: Any) -> Offset | None:
        """The start pinned for these start options by an earlier run, if any."""
        kind = f"{self.source}-source-start"
        try:
            content = self.folder.read_record(
                self._start_name(start_options), kind, (FORMAT_VERSION,)
            )
        except FileNotFoundError:
            return None
        return dict(content["offset"])

    def pin_start(self, start_options: Any, offset: Offset) -> None:
        """Record ``offset`` as the start for these start options, durably, before returning."""
        kind = f"{self.source}-source-start"
        self.folder.write_record(
            self._start_name(start_options), kind, FORMAT_VERSION, {"offset": offset}
        )

    @property
    def bad_records(self) -> BadRecordCounts:
        """The bad-record counts of this source's tasks, under ``errors/``."""
        return BadRecordCounts(self.folder, errors_kind(self.source), FORMAT_VERSION)

    def record_counts(self, offset_range: str, skipped: int, quarantined: int) -> None:
        """Record the bad records of one offset range (in its task; replaces a replay's)."""
        self.bad_records.record(offset_range, skipped, quarantined)

    def record_progress(self, progress: dict[str, Any]) -> None:
        """Replace the source's progress record (driver side, when a batch is planned)."""
        record = encode_record(progress_kind(self.source), FORMAT_VERSION, progress)
        self.folder.write(PROGRESS, record, sync=False)

    def counts(self) -> dict[str, int]:
        """Bad records skipped and quarantined so far, summed over every range read."""
        return self.bad_records.total()
