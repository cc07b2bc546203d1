"""The RocksDB backend: state in local RocksDB instances, incremental checkpoints to any URI.

Flink's EmbeddedRocksDBStateBackend with incremental checkpoints. State lives
on the Python workers' local disk, so it may be far larger than their memory
(which :class:`~firesteel.rocksdb.options.RocksDBOptions` bounds); each batch
uploads to ``path`` only the SST files the previous version did not already
hold. Select it as ``RocksDBBackend("s3://bucket/state")`` or by name
(``rocksdb``, entry point group ``firesteel.backends``).
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa

from firesteel.backends.spi import (
    KeyedTask,
    OperatorSpec,
    StoredState,
    TaskStore,
    TaskStoreBackend,
)
from firesteel.core.spi import ConfigError
from firesteel.core.toolkit import StorageConfig, WorkerCache
from firesteel.rocksdb.local import LocalFolder, check_writable, default_local_dir, worker_root
from firesteel.rocksdb.options import RocksDBOptions
from firesteel.rocksdb.storage import CheckpointStorage
from firesteel.rocksdb.store import MAX_CACHED_STORES, RocksDBKeyedStore


@dataclass(frozen=True)
class RocksDBBackend(TaskStoreBackend):
    """Keyed state in local RocksDB instances, checkpointed incrementally to ``path``.

    ``path``: where checkpoints go (a local path or a pyarrow filesystem URI:
    ``file:///...``, ``s3://...``, ``hdfs://...``, ``gs://...``).
    ``local_dir``: local disk of the Python workers for the instances (default:
    the system temp folder); it needs room for the state of the key groups a
    worker runs. ``retain``: committed versions kept (at least 1). ``options``:
    RocksDB tuning and the memory budget. ``cache``: keep instances open in the
    worker between batches, so a batch restores nothing when the worker already
    holds the committed version (turn off only in tests). ``storage_options``:
    how to reach an object store, by Hadoop's setting names
    (``{"fs.s3a.endpoint": ..., "fs.s3a.access.key": ...}``, see
    :mod:`firesteel.core.storage`), over the session's ``spark.hadoop.fs.*``.
    """

    path: str
    local_dir: str = field(default_factory=default_local_dir)
    retain: int = 10
    options: RocksDBOptions = field(default_factory=RocksDBOptions)
    cache: bool = True
    name: str = "rocksdb"
    location_role: ClassVar[str] = "checkpoint"
    storage_options: StorageConfig | Mapping[str, str] = field(default_factory=StorageConfig)
    worker_stores: ClassVar[WorkerCache[Hashable, TaskStore]] = WorkerCache(
        capacity=MAX_CACHED_STORES, close=lambda store: store.close()
    )

    def __post_init__(self) -> None:
        # A frozen dataclass: the settings become their hashable, secret-hiding form.
        object.__setattr__(self, "storage_options", StorageConfig.given(self.storage_options))
        if not self.path:
            msg = "rocksdb backend: a checkpoint location (path or URI) is required"
            raise ConfigError(msg)
        if self.retain < 1:
            msg = f"rocksdb backend: retain must be >= 1, got {self.retain}"
            raise ConfigError(msg)
        if not isinstance(self.options, RocksDBOptions):
            msg = (
                f"rocksdb backend: options must be a RocksDBOptions, "
                f"got {type(self.options).__name__}"
            )
            raise ConfigError(msg)

    def storage(self, operator: str) -> CheckpointStorage:
        """The checkpoint files of ``operator``."""
        return CheckpointStorage(self.location, operator, self._storage_config)

    def validate(self) -> None:
        super().validate()
        check_writable(self.local_dir)

    def new_store(self, spec: OperatorSpec, task: KeyedTask) -> TaskStore:
        name = f"{spec.name}-{uuid.uuid4().hex[:8]}-{task.key_groups.label}"
        return RocksDBKeyedStore(
            self.storage(spec.name),
            spec,
            task.key_groups,
            folder=LocalFolder(worker_root(self.local_dir) / name),
            options=self.options,
            retain=self.retain,
            cached=self.cache,
        )

    def store_key(self, spec: OperatorSpec, task: KeyedTask) -> Hashable:
        # An instance holds exactly the task's key groups, tuned by ``options``, under
        # this worker's folder of ``local_dir``.
        return (
            self.location,
            spec.name,
            task.scope.query_id,
            task.key_groups,
            self.options,
            self.local_dir,
        )

    def inspect(self, operator: str | None = None, batch: int | None = None) -> pa.Table:
        from firesteel.rocksdb.inspect import read_state

        return read_state(
            self.location,
            operator=operator,
            batch=batch,
            options=self.options,
            storage=self._storage_config,
        )

    def stored_state(self, operator: str, batch: int | None = None) -> StoredState | None:
        """``operator``'s entries at version ``batch`` (default: the latest complete one),
        still serialized: what a savepoint exports."""
        from firesteel.rocksdb.inspect import read_stored

        return read_stored(
            self.location, operator, batch, options=self.options, config=self._storage_config
        )
