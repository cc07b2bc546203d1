"""The RocksDB backend: state in local RocksDB instances, incremental checkpoints to any URI.

Flink's EmbeddedRocksDBStateBackend with incremental checkpoints. State lives
on the Python workers' local disk, so it may be far larger than their memory
(which :class:`~firesteel.rocksdb.options.RocksDBOptions` bounds); each batch
uploads to ``path`` only the SST files the previous version did not already
hold. Select it as ``RocksDBBackend("s3://bucket/state")`` or by name
(``rocksdb``, entry point group ``firesteel.backends``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from firesteel.backends.spi import (
    KeyedTask,
    OperatorSpec,
    TaskStore,
    TaskStoreBackend,
)
from firesteel.core.spi import ConfigError, filesystem
from firesteel.rocksdb.local import check_writable, default_local_dir, worker_root
from firesteel.rocksdb.options import RocksDBOptions
from firesteel.rocksdb.storage import CheckpointStorage
from firesteel.rocksdb.store import worker_store


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
    holds the committed version (turn off only in tests).
    """

    path: str
    local_dir: str = field(default_factory=default_local_dir)
    retain: int = 10
    options: RocksDBOptions = field(default_factory=RocksDBOptions)
    cache: bool = True
    name: str = "rocksdb"

    def __post_init__(self) -> None:
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

    @property
    def location(self) -> str:
        return self.path

    def storage(self, operator: str) -> CheckpointStorage:
        """The checkpoint files of ``operator``."""
        return CheckpointStorage(self.location, operator)

    def validate(self) -> None:
        try:
            fsys, root = filesystem(self.location)
            fsys.create_dir(root, recursive=True)
        except (OSError, pa.ArrowException) as exc:
            msg = f"rocksdb backend: cannot use checkpoint location {self.location!r}: {exc}"
            raise ConfigError(msg) from exc
        check_writable(self.local_dir)

    def task_store(self, spec: OperatorSpec, task: KeyedTask) -> TaskStore:
        return worker_store(
            self.storage(spec.name),
            spec,
            task,
            local_root=worker_root(self.local_dir),
            options=self.options,
            retain=self.retain,
            cache=self.cache,
        )

    def inspect(self, operator: str | None = None, batch: int | None = None) -> pa.Table:
        from firesteel.rocksdb.inspect import read_state

        return read_state(self.location, self.options, operator, batch)
