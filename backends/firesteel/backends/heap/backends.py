"""The two backends of the heap family: where their snapshots go.

* :class:`FilesystemBackend`: Flink's HashMapStateBackend with
  FileSystemCheckpointStorage. Use it in production: snapshots go to durable
  storage given as a local path or a URI (``file:///...``,
  ``s3://bucket/prefix``, ``hdfs://...``, ``gs://...``), and a restarted query
  (on any machine that can read the URI) resumes from them.
* :class:`HeapBackend`: with JobManagerCheckpointStorage, for development:
  tests and notebooks. Its snapshots go to a local directory (a temporary one
  unless you name it) without fsync, so they survive a restart of the query on
  the same machine, but not the loss of the machine, and executors on other
  machines cannot read them.

Both keep state in the Python workers' memory
(:mod:`firesteel.backends.heap.store`), so it must fit there.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pyarrow as pa

from firesteel.backends.heap.store import HeapKeyedStore
from firesteel.backends.storage import SnapshotStorage
from firesteel.backends.store_base import TaskStore, TaskStoreBackend
from firesteel.core.spi import ConfigError
from firesteel.core.toolkit import StorageConfig, WorkerCache
from firesteel.state.backend import (
    KeyedTask,
    OperatorSpec,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FilesystemBackend(TaskStoreBackend):
    """Keyed state in memory, snapshotted to ``location`` (a path or pyarrow filesystem URI).

    ``retain``: committed versions kept (at least; older ones are deleted once a
    newer full snapshot makes them unnecessary). ``full_snapshot_every``: a full
    snapshot every this many batches, deltas in between (1 = always full).
    ``cache``: keep state in the Python worker between batches (reloading only
    when another worker wrote the latest version); turn off to bound memory.
    ``storage_options``: how to reach an object store, by Hadoop's setting names
    (``{"fs.s3a.endpoint": ..., "fs.s3a.access.key": ...}``, see
    :mod:`firesteel.core.storage`); without it the store's own defaults apply
    (for S3, the AWS credential chain).
    """

    path: str
    retain: int = 10
    full_snapshot_every: int = 10
    cache: bool = True
    name: str = "filesystem"
    storage_options: StorageConfig | Mapping[str, str] = field(default_factory=StorageConfig)
    worker_stores: ClassVar[WorkerCache[Hashable, TaskStore]] = WorkerCache()

    def __post_init__(self) -> None:
        # A frozen dataclass: the settings become their hashable, secret-hiding form.
        object.__setattr__(self, "storage_options", StorageConfig.given(self.storage_options))
        if self.retain < 1:
            msg = f"{self.name} backend: retain must be >= 1, got {self.retain}"
            raise ConfigError(msg)
        if self.full_snapshot_every < 1:
            msg = (
                f"{self.name} backend: full_snapshot_every must be >= 1, "
                f"got {self.full_snapshot_every}"
            )
            raise ConfigError(msg)
        if not self.path:
            msg = f"{self.name} backend: a snapshot location (path or URI) is required"
            raise ConfigError(msg)

    @property
    def durable(self) -> bool:
        """Whether local snapshot files are fsynced before they become visible."""
        return True

    def storage(self, operator: str) -> SnapshotStorage:
        """The snapshot files of ``operator``."""
        return SnapshotStorage(
            self.location, operator, durable=self.durable, config=self._storage_config
        )

    def recorded_parallelism(self, operator: str) -> int | None:
        """How many files the newest version has: one per task that wrote it.

        Leftovers of a failed attempt are superseded or reported when restored;
        here the newest version's distinct ranges are counted.
        """
        versions = self.storage(operator).list_versions()
        if not versions:
            return None
        newest = versions[max(versions)]
        return len({(f.key_groups.start, f.key_groups.end) for f in newest})

    def new_store(self, spec: OperatorSpec, task: KeyedTask) -> TaskStore:
        return HeapKeyedStore(
            self.storage(spec.name),
            spec,
            retain=self.retain,
            full_snapshot_every=self.full_snapshot_every,
        )

    def store_key(self, spec: OperatorSpec, task: KeyedTask) -> Hashable:
        # One store holds every key group this worker ran for the operator and query.
        return (self.location, spec.name, task.scope.query_id)

    def inspect(self, operator: str | None = None, batch: int | None = None) -> pa.Table:
        from firesteel.backends.inspect import read_state

        return read_state(
            self.location, operator=operator, batch=batch, storage=self._storage_config
        )


def _default_path() -> str:
    return str(Path(tempfile.gettempdir()) / "firesteel-heap-state")


@dataclass(frozen=True)
class HeapBackend(FilesystemBackend):
    """Keyed state in memory; snapshots to the local directory ``path`` (development only)."""

    path: str = field(default_factory=_default_path)
    name: str = "heap"

    def __post_init__(self) -> None:
        super().__post_init__()
        if "://" in self.path and not self.path.startswith("file://"):
            msg = (
                f"heap backend: {self.path!r} is not a local path; the heap backend snapshots "
                "to local disk only (development). Use FilesystemBackend for remote storage"
            )
            raise ConfigError(msg)

    @property
    def durable(self) -> bool:
        return False

    def validate(self) -> None:
        logger.warning(
            "firesteel: the heap state backend is for development only; snapshots in %s are "
            "local and not fsynced",
            self.path,
        )
        super().validate()
