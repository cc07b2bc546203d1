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
  skipped or quarantined. A replay of the range replaces its record, so the sum
  (query progress) never counts a record twice;
* ``progress.json``: what the source knew when it last planned a batch (for Kafka:
  the committed positions, the log ends and the lag between them), replaced each
  time, read by ``firesteel status`` and the Prometheus exporter.

Records go through :mod:`firesteel.core.durable` on any pyarrow filesystem
(``hdfs://``, ``s3://``...), like Spark's own checkpoint.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from pyarrow import fs

from firesteel.core.checkpoint import FIRESTEEL_DIR, filesystem, read_query_id
from firesteel.core.durable import decode_record, encode_record, write_atomically
from firesteel.core.errors import ConfigError
from firesteel.core.metrics.sources import PROGRESS, progress_kind
from firesteel.core.source import Offset

FORMAT_VERSION = 1


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class SourceFolder:
    """One source's folder in its query's checkpoint. Picklable: tasks write counts."""

    source: str
    """The connector's name (``kafka``): names the folder, its records and its errors."""
    checkpoint: str
    """The ``checkpointLocation`` option, as the user spelled it (any spelling works)."""
    subscription: str
    """What the source reads (``subscribe`` or ``subscribePattern``); names the folder."""

    def _path(self, name: str = "") -> tuple[fs.FileSystem, str]:
        fsys, base = filesystem(self.checkpoint)
        folder = f"{base}/{FIRESTEEL_DIR}/{self.source}-source-{_digest(self.subscription)}"
        return fsys, f"{folder}/{name}" if name else folder

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
        return f"start-{_digest(start_options)}.json"

    def pinned_start(self, start_options: Any) -> Offset | None:
        """The start pinned for these start options by an earlier run, if any."""
        fsys, path = self._path(self._start_name(start_options))
        try:
            with fsys.open_input_stream(path) as stream:
                data = stream.read()
        except FileNotFoundError:
            return None
        content = decode_record(data, path, f"{self.source}-source-start", (FORMAT_VERSION,))
        return dict(content["offset"])

    def pin_start(self, start_options: Any, offset: Offset) -> None:
        """Record ``offset`` as the start for these start options, durably, before returning."""
        fsys, path = self._path(self._start_name(start_options))
        fsys.create_dir(self._path()[1], recursive=True)
        record = encode_record(f"{self.source}-source-start", FORMAT_VERSION, {"offset": offset})
        write_atomically(fsys, path, record)

    def record_counts(self, offset_range: str, skipped: int, quarantined: int) -> None:
        """Record the bad records of one offset range (in its task; replaces a replay's)."""
        fsys, folder = self._path("errors")
        fsys.create_dir(folder, recursive=True)
        counts = {"skipped": skipped, "quarantined": quarantined}
        record = encode_record(f"{self.source}-source-errors", FORMAT_VERSION, counts)
        write_atomically(fsys, f"{folder}/{offset_range}.json", record)

    def record_progress(self, progress: dict[str, Any]) -> None:
        """Replace the source's progress record (driver side, when a batch is planned)."""
        fsys, path = self._path(PROGRESS)
        fsys.create_dir(self._path()[1], recursive=True)
        record = encode_record(progress_kind(self.source), FORMAT_VERSION, progress)
        write_atomically(fsys, path, record, sync=False)

    def counts(self) -> dict[str, int]:
        """Bad records skipped and quarantined so far, summed over every range read."""
        fsys, folder = self._path("errors")
        total = {"skipped": 0, "quarantined": 0}
        for info in fsys.get_file_info(fs.FileSelector(folder, allow_not_found=True)):
            if not info.base_name.endswith(".json"):
                continue
            with fsys.open_input_stream(info.path) as stream:
                counts = decode_record(
                    stream.read(), info.path, f"{self.source}-source-errors", (FORMAT_VERSION,)
                )
            for key in total:
                total[key] += int(counts[key])
        return total
