"""The heap backend: state in Python dicts, snapshots to local disk. For development only.

Flink's HashMapStateBackend with JobManagerCheckpointStorage: convenient for
tests and notebooks, not for production. Its snapshots go to a local
directory (a temporary one unless you name it) without fsync, so they survive
a restart of the query on the same machine, but not the loss of the machine,
and executors on other machines cannot read them. Use
:class:`~firesteel.backends.filesystem.FilesystemBackend` for anything else.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from firesteel.backends.filesystem import FilesystemBackend
from firesteel.core.errors import ConfigError

logger = logging.getLogger(__name__)


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
