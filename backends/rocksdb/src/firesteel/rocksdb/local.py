"""A Python worker's local disk: RocksDB instances, their checkpoints, and downloaded files.

::

    <local_dir>/firesteel-rocksdb/w<pid>-<random>/   one folder per worker process
        <store>/                                     one per (operator, query, key groups)
            db-3/                                    the open instance
            ck-7-<attempt>/                          RocksDB checkpoint of the last snapshot
            files/<shared name>                      SST files known to be in storage
            tmp-4/                                   instances being merged (rescaling)

SST files are immutable, so everything here is hard links: a checkpoint links
the instance's SSTs, ``files/`` links what was uploaded or downloaded under
its storage name, and an instance is rebuilt from a checkpoint or a manifest
by linking (copying only the few small non-SST files, which RocksDB appends
to). A restore downloads only what ``files/`` lacks.

A worker killed with SIGKILL cannot clean up; the next worker to start in the
same ``local_dir`` removes the folders of workers whose process is gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from firesteel.core.spi import ConfigError
from firesteel.core.toolkit import WorkerCache
from firesteel.rocksdb.manifest import Manifest
from firesteel.rocksdb.options import RocksDBOptions
from firesteel.rocksdb.storage import CheckpointStorage

logger = logging.getLogger(__name__)

ROOT_NAME = "firesteel-rocksdb"
SST_SUFFIX = ".sst"

_ROOTS: WorkerCache[str, Path] = WorkerCache()


def default_local_dir() -> str:
    """Where instances live unless the backend names a folder: the system's temp folder."""
    return tempfile.gettempdir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_writable(local_dir: str) -> Path:
    """``<local_dir>/firesteel-rocksdb``, created; a ConfigError naming it when unusable."""
    base = Path(local_dir) / ROOT_NAME
    try:
        base.mkdir(parents=True, exist_ok=True)
        probe = base / f".probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        msg = (
            f"rocksdb backend: local_dir {local_dir!r} is not a writable folder ({exc}); "
            "point local_dir at local disk the Python workers can write"
        )
        raise ConfigError(msg) from exc
    return base


def worker_root(local_dir: str) -> Path:
    """This process's folder under ``local_dir`` (created once; removes dead workers' folders)."""
    return _ROOTS.get(local_dir, lambda: _new_root(local_dir))


def _new_root(local_dir: str) -> Path:
    base = check_writable(local_dir)
    for leftover in base.glob("w*-*"):
        pid_text = leftover.name[1:].split("-", 1)[0]
        if pid_text.isdigit() and not _alive(int(pid_text)):
            logger.info("rocksdb: removing the folder of a dead worker %s", leftover)
            shutil.rmtree(leftover, ignore_errors=True)
    root = base / f"w{os.getpid()}-{uuid.uuid4().hex[:8]}"
    root.mkdir()
    return root


def open_instance(path: Path, options: RocksDBOptions, *, read_only: bool = False) -> Any:
    """Open (or create) the RocksDB instance at ``path``, writing without a log."""
    import rocksdict as rd

    if read_only:
        return rd.Rdict(str(path), options.native(), access_type=rd.AccessType.read_only(False))
    db = rd.Rdict(str(path), options.native())
    write_options = rd.WriteOptions()
    # A property at run time; rocksdict's stub declares it a method.
    write_options.disable_wal = True  # type: ignore[method-assign, assignment]
    db.set_write_options(write_options)
    return db


def clone(source: Path, target: Path) -> None:
    """A new instance folder with the content of checkpoint ``source``: SSTs linked, rest copied."""
    target.mkdir()
    for entry in source.iterdir():
        if entry.name.endswith(SST_SUFFIX):
            os.link(entry, target / entry.name)
        else:
            shutil.copy2(entry, target / entry.name)


class LocalFolder:
    """The local folders of one store (see module docs)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files = root / "files"
        self.files.mkdir(parents=True, exist_ok=True)
        self._serial = 0

    def _next(self, prefix: str) -> Path:
        self._serial += 1
        return self.root / f"{prefix}-{self._serial}"

    def new_instance_dir(self) -> Path:
        """A folder name for a new instance (not created)."""
        return self._next("db")

    def new_temp_dir(self) -> Path:
        """A folder name for a temporary instance (not created)."""
        return self._next("tmp")

    def checkpoint_dir(self, version: int, attempt: str) -> Path:
        """Where the checkpoint of ``version`` by ``attempt`` goes (RocksDB creates it)."""
        return self.root / f"ck-{version}-{attempt}"

    def cached(self, storage_path: str) -> Path:
        """The local copy of a shared file, by its storage name."""
        return self.files / storage_path.rsplit("/", 1)[-1]

    def remember(self, local: Path, storage_path: str) -> None:
        """Keep ``local`` (just uploaded) in the file cache under its storage name."""
        cached = self.cached(storage_path)
        if not cached.exists():
            os.link(local, cached)

    def prune(self, keep: set[str]) -> None:
        """Drop cached files whose storage name is not in ``keep``."""
        names = {path.rsplit("/", 1)[-1] for path in keep}
        for entry in self.files.iterdir():
            if entry.name not in names:
                entry.unlink(missing_ok=True)

    def materialize(
        self,
        manifest: Manifest,
        storage: CheckpointStorage,
        target: Path,
        on_download: Callable[[], None],
    ) -> int:
        """Build the checkpoint ``manifest`` describes in ``target``; returns files downloaded.

        Shared files come from the cache when there (linked), else are
        downloaded into it and verified; private files are always downloaded.
        ``on_download`` runs after each download (the crash tests' fault point).
        """
        target.mkdir()
        downloaded = 0
        for stored in manifest.files:
            destination = target / stored.local
            if stored.shared:
                cached = self.cached(stored.path)
                if not cached.exists() or cached.stat().st_size != stored.size:
                    storage.download(stored, cached, manifest)
                    downloaded += 1
                    on_download()
                os.link(cached, destination)
            else:
                storage.download(stored, destination, manifest)
                downloaded += 1
                on_download()
        return downloaded

    @staticmethod
    def remove(path: Path | None) -> None:
        """Delete a folder of this store (an instance or checkpoint no longer needed)."""
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)

    def delete(self) -> None:
        """Delete every folder of this store."""
        with contextlib.suppress(OSError):
            shutil.rmtree(self.root)
