"""Checkpoint committers: durable records of which write-ahead-log segments were sent.

A :class:`~firesteel.sinks.write_ahead.WriteAheadSink` sends the segment of
(sink, batch, partition) to its target and then asks its committer to record
the fact. After a crash, the segments the committer knows are skipped, so only
a segment whose send was interrupted can reach the target twice. This is
Flink's ``CheckpointCommitter``; a committer may keep its records anywhere
durable (files here, a Cassandra table in ``firesteel-cassandra``).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping

from pyarrow import fs

from firesteel.core.toolkit import Folder, StorageConfig, layout

logger = logging.getLogger(__name__)


class CheckpointCommitter(ABC):
    """Records, durably, that the segment of (sink, batch, partition) reached the target.

    Called on the driver only, by :meth:`WriteAheadSink.commit_batch`, one
    segment at a time in partition order. The contract:

    * :meth:`open` runs before any other call, in every driver process that
      uses the committer; it creates what the records need and is idempotent.
    * :meth:`commit` returns only once the record is durable: after it
      returns, :meth:`is_committed` answers True for that key in this and every
      later process, even across a SIGKILL. Committing a key twice is the
      same as once.
    * :meth:`is_committed` never answers True for a key that was not
      committed (that would lose data) and never turns back to False for a
      committed key, except through :meth:`forget`.
    * :meth:`forget` may drop records of batches below ``batch_id``: Spark
      never re-runs a batch once the next one has started, so they will not be
      asked about again.

    Committers are pickled with their sink; keep their state plain (paths,
    connection settings) and open connections lazily in :meth:`open`.
    """

    def open(self) -> None:
        """Driver side, before the first use: create tables or folders (idempotent)."""

    @abstractmethod
    def is_committed(self, sink_id: str, batch_id: int, partition_id: int) -> bool:
        """Whether the segment of (sink, batch, partition) was recorded as sent."""

    @abstractmethod
    def commit(self, sink_id: str, batch_id: int, partition_id: int) -> None:
        """Record durably that the segment was sent (idempotent)."""

    def forget(self, sink_id: str, batch_id: int) -> None:
        """Drop the records of batches below ``batch_id`` (optional housekeeping)."""

    def close(self) -> None:
        """Release connections; the committer may be opened again later."""


class FileCheckpointCommitter(CheckpointCommitter):
    """Marker files ``<directory>/<sink>/<batch>/<partition>.committed``.

    ``directory`` is a local path or a URI as Spark users write it (``s3a://``,
    ``hdfs://``, ``gs://``; see :mod:`firesteel.core.storage`), reached with
    ``storage_options`` (Hadoop's setting names). A marker is either absent or
    complete: on a local filesystem or HDFS it is written under a unique
    temporary name and renamed into place; on an object store it is one PUT
    under its final name, visible whole or not at all. :meth:`is_committed` is
    one request (a HEAD) for a segment not yet sent, and :meth:`forget` lists
    the sink's folder only, which holds the batches not yet forgotten (one or
    two). A SIGKILL never
    loses a marker whose :meth:`commit` returned (the data sits in the OS page
    cache); surviving power loss additionally needs storage that syncs on close.
    """

    def __init__(
        self, directory: str, storage_options: StorageConfig | Mapping[str, str] | None = None
    ) -> None:
        self.directory = directory.rstrip("/")
        self.storage = StorageConfig.given(storage_options)
        self.folder = Folder(self.directory, self.storage)

    @classmethod
    def for_checkpoint(
        cls, checkpoint: str, storage_options: StorageConfig | Mapping[str, str] | None = None
    ) -> FileCheckpointCommitter:
        """Markers inside a query's checkpoint: ``<checkpoint>/firesteel/wal-commits``."""
        return cls(layout.write_ahead_commits(checkpoint), storage_options)

    def _marker(self, sink_id: str, batch_id: int, partition_id: int) -> str:
        return f"{sink_id}/{batch_id}/{partition_id}.committed"

    def open(self) -> None:
        self.folder.make()

    def is_committed(self, sink_id: str, batch_id: int, partition_id: int) -> bool:
        # Opening, not get_file_info: on an object store a missing key costs one HEAD
        # that way, where get_file_info also lists the key as a folder prefix.
        try:
            with self.folder.open_input(self._marker(sink_id, batch_id, partition_id)):
                return True
        except FileNotFoundError:
            return False

    def commit(self, sink_id: str, batch_id: int, partition_id: int) -> None:
        marker = self._marker(sink_id, batch_id, partition_id)
        self.folder.write(marker, f"{sink_id} {batch_id} {partition_id}\n".encode())

    def forget(self, sink_id: str, batch_id: int) -> None:
        for info in self.folder.entries(sink_id):
            if (
                info.type == fs.FileType.Directory
                and info.base_name.isdigit()
                and int(info.base_name) < batch_id
            ):
                self.folder.delete_folder(f"{sink_id}/{info.base_name}")

    def __repr__(self) -> str:
        return f"FileCheckpointCommitter({self.directory!r})"
