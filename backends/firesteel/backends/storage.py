"""Where snapshots live: the layout of one operator's state on a pyarrow filesystem.

::

    <location>/<operator>/
        _operator.json                    who owns this state (query id, key, first batch)
        v000000000007/                    version 7 == written by batch 7
            0000-0063-delta-<digest>.snap one file per operator partition (key-group range)
            0064-0127-full-<digest>.snap

A version directory holds one file per operator partition of that batch;
after rescaling, the ranges of different versions differ, and a key group is
restored from whichever file of each version covers it. The digest in the
name is the BLAKE2b of the file's body, so a worker can tell whether the file
it wrote is the one that is now committed (see
:mod:`firesteel.backends.heap.store`).

The operator's folder is a :class:`~firesteel.core.folder.Folder`; writes
follow the durability policy of :mod:`firesteel.core.durable` (the heap
backend, development only, skips the fsyncs).
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from typing import Any

from pyarrow import fs

from firesteel.backends import format as snapshot_format
from firesteel.core.spi import CheckpointCorruptError
from firesteel.core.toolkit import Folder, StorageConfig, decode_record, encode_record
from firesteel.state.keygroups import KeyGroupRange

logger = logging.getLogger(__name__)

METADATA_FILE = "_operator.json"
METADATA_KIND = "operator"
METADATA_FORMAT = 1
_VERSION_DIR = re.compile(r"^v(\d{12})$")
_FILE = re.compile(r"^(\d{4})-(\d{4})-(full|delta)-([0-9a-f]{16})\.snap$")

FULL = "full"
DELTA = "delta"


def read_stored(filesystem: fs.FileSystem, path: str, what: str) -> bytes:
    """The whole file at ``path``; a missing one is a :class:`CheckpointCorruptError` naming
    ``what`` (its kind and where users see it): the restore or read needs it."""
    try:
        with filesystem.open_input_stream(path) as stream:
            return bytes(stream.read())
    except FileNotFoundError as exc:
        msg = f"{what} is missing (deleted while in use?)"
        raise CheckpointCorruptError(msg) from exc


def version_dir_name(version: int) -> str:
    """``v000000000007`` for version 7."""
    return f"v{version:012d}"


@dataclass(frozen=True)
class SnapshotFile:
    """One snapshot file as the listing shows it (nothing read yet)."""

    version: int
    key_groups: KeyGroupRange
    kind: str
    digest: str
    path: str
    mtime_ns: int = 0
    """When the listing saw it last modified (0 when not listed)."""

    @property
    def name(self) -> str:
        """The file's base name, which is also its identity."""
        return self.path.rsplit("/", 1)[-1]


class SnapshotStorage:
    """Reads and writes the snapshot files of one operator under ``location``.

    Picklable (the filesystem is created lazily), so it travels to executors.
    """

    def __init__(
        self,
        location: str,
        operator: str,
        *,
        durable: bool = True,
        config: StorageConfig | None = None,
    ) -> None:
        self.location = location
        self.operator = operator
        self.durable = durable
        self.config = config
        self.folder = Folder(location, config).child(operator)
        """The operator's folder (resolved on first use)."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its settings: the receiving process opens its own filesystem.
        rebuild = functools.partial(type(self), durable=self.durable, config=self.config)
        return rebuild, (self.location, self.operator)

    @property
    def fs(self) -> fs.FileSystem:
        """The pyarrow filesystem (created on first use)."""
        return self.folder.fs

    @property
    def base(self) -> str:
        """The operator's folder on :attr:`fs`."""
        return self.folder.path()

    def describe(self, path: str) -> str:
        """A path as users should see it in messages (with the URI scheme when there is one)."""
        return self.folder.describe(path)

    # -- metadata ---------------------------------------------------------------------------

    def read_metadata(self) -> dict[str, Any] | None:
        """The operator's ``_operator.json``, or None for an operator that never ran."""
        try:
            raw = self.folder.read(METADATA_FILE)
        except FileNotFoundError:
            return None
        where = self.describe(self.folder.path(METADATA_FILE))
        meta: dict[str, Any] = decode_record(raw, where, METADATA_KIND, (METADATA_FORMAT,))
        return meta

    def write_metadata(self, meta: dict[str, Any]) -> None:
        """Write ``_operator.json`` atomically (tasks of the first batch all write the same)."""
        body = encode_record(METADATA_KIND, METADATA_FORMAT, meta)
        self.folder.write(METADATA_FILE, body, sync=self.durable)

    # -- listing ----------------------------------------------------------------------------

    def list_versions(self) -> dict[int, list[SnapshotFile]]:
        """Every snapshot file, by version. Temporary and unknown files are ignored."""
        versions: dict[int, list[SnapshotFile]] = {}
        for info in self.folder.entries(recursive=True):
            if info.type != fs.FileType.File:
                continue
            parent, _, name = info.path.rpartition("/")
            dir_match = _VERSION_DIR.match(parent.rpartition("/")[2])
            file_match = _FILE.match(name)
            if not dir_match or not file_match:
                continue
            version = int(dir_match.group(1))
            start, end, kind, file_digest = file_match.groups()
            versions.setdefault(version, []).append(
                SnapshotFile(
                    version,
                    KeyGroupRange(int(start), int(end)),
                    kind,
                    file_digest,
                    info.path,
                    info.mtime_ns or 0,
                )
            )
        return versions

    # -- files ------------------------------------------------------------------------------

    def read(self, file: SnapshotFile) -> snapshot_format.Snapshot:
        """Read and verify one snapshot file; a missing or damaged file names itself."""
        data = read_stored(self.fs, file.path, f"state snapshot {self.describe(file.path)}")
        snapshot = snapshot_format.decode(data, self.describe(file.path))
        if snapshot.header.get("body_digest") != file.digest:
            msg = (
                f"state snapshot {self.describe(file.path)}: its name says digest {file.digest} "
                f"but its header says {snapshot.header.get('body_digest')} (renamed or damaged)"
            )
            raise CheckpointCorruptError(msg)
        return snapshot

    def write(
        self, version: int, key_groups: KeyGroupRange, kind: str, data: bytes, body_digest: str
    ) -> SnapshotFile:
        """Write one snapshot file atomically and return it."""
        key = f"{version_dir_name(version)}/{key_groups.label}-{kind}-{body_digest}.snap"
        self.folder.write(key, data, sync=self.durable)
        return SnapshotFile(version, key_groups, kind, body_digest, self.folder.path(key))

    def remove_stale(self, written: SnapshotFile) -> None:
        """Delete the files of the same version that ``written`` supersedes.

        A re-run of batch N replaces what a failed attempt wrote. A file is
        superseded when its key groups all lie within ``written``'s: deleting
        it never leaves a key group uncovered, whatever order attempts finish
        in. An attempt with a narrower range (a re-run with more partitions, or
        a zombie of an attempt that used them) leaves wider files in place;
        :func:`plan_restore` then takes, per key group, the newest. Once
        version N+1 exists nothing is deleted: a zombie finishing late must not
        touch what N+1 was built on.
        """
        folder = version_dir_name(written.version)
        later = self.folder.info(version_dir_name(written.version + 1))
        if later.type != fs.FileType.NotFound:
            return
        for info in self.folder.entries(folder):
            match = _FILE.match(info.base_name)
            if not match or info.path == written.path:
                continue
            other = KeyGroupRange(int(match.group(1)), int(match.group(2)))
            if other.start >= written.key_groups.start and other.end <= written.key_groups.end:
                logger.info("state: removing leftover of a failed attempt %s", info.path)
                self.folder.delete(f"{folder}/{info.base_name}")

    def drop_versions_before(self, version: int) -> int:
        """Delete every version directory older than ``version``; returns how many."""
        dropped = 0
        for info in self.folder.entries():
            match = _VERSION_DIR.match(info.base_name)
            if match and int(match.group(1)) < version:
                try:
                    self.folder.fs.delete_dir(info.path)
                    dropped += 1
                except FileNotFoundError:
                    continue
        return dropped


@dataclass(frozen=True)
class RestorePlan:
    """How to rebuild one key group at a version: from memory or empty, then these files."""

    from_memory: bool
    files: tuple[SnapshotFile, ...]
    """Oldest first."""


def plan_restore(
    storage: SnapshotStorage,
    listing: dict[int, list[SnapshotFile]],
    key_groups: KeyGroupRange,
    version: int,
    *,
    first_version: int,
    in_memory: dict[int, tuple[int, str]],
) -> dict[int, RestorePlan]:
    """The files that rebuild each key group of ``key_groups`` at ``version``.

    Walks back from ``version``: each version must have a file covering the key
    group (every task writes every batch; see :func:`_choose` when two attempts
    left several), until a full
    snapshot, the operator's first version, or the version whose file is the
    one the worker already holds in memory (``in_memory[kg] == (version, name)``).
    A version without a file for the key group means a file was lost: that is
    a :class:`CheckpointCorruptError` naming the file the next version expects.
    """
    plans: dict[int, RestorePlan] = {}
    for key_group in key_groups:
        chain: list[SnapshotFile] = []
        from_memory = False
        current = version
        while True:
            covering = [f for f in listing.get(current, []) if key_group in f.key_groups]
            if not covering:
                raise _missing(storage, current, key_group, chain)
            file = _choose(storage, covering, chain[-1] if chain else None)
            if in_memory.get(key_group) == (current, file.name):
                from_memory = True
                break
            chain.append(file)
            if file.kind == FULL or current == first_version:
                break
            current -= 1
            if current < first_version:
                msg = (
                    f"state of key group {key_group}: delta {storage.describe(file.path)} has no "
                    "full snapshot before it"
                )
                raise CheckpointCorruptError(msg)
        plans[key_group] = RestorePlan(from_memory, tuple(reversed(chain)))
    return plans


def _choose(
    storage: SnapshotStorage, covering: list[SnapshotFile], child: SnapshotFile | None
) -> SnapshotFile:
    """One of several files of a version covering a key group (attempts of one batch).

    The one the next version was built on, as its header names it; else the
    newest, as Spark commits the batch with its last attempt.
    """
    if len(covering) == 1:
        return covering[0]
    if child is not None and child.kind != FULL:
        parents = set(storage.read(child).header.get("parents", []))
        named = [f for f in covering if f.name in parents]
        if named:
            return named[0]
    return max(covering, key=lambda f: (f.mtime_ns, f.name))


def _missing(
    storage: SnapshotStorage, version: int, key_group: int, chain: list[SnapshotFile]
) -> CheckpointCorruptError:
    folder = storage.describe(f"{storage.base}/{version_dir_name(version)}")
    expected = "a file named <start>-<end>-(full|delta)-<digest>.snap covering it"
    if chain:
        child = chain[-1]
        try:
            parents = storage.read(child).header.get("parents", [])
        except CheckpointCorruptError:
            parents = []
        if parents:
            expected = " or ".join(f"{folder}/{name}" for name in parents)
        msg = (
            f"state snapshot missing: {storage.describe(child.path)} builds on version "
            f"{version} of key group {key_group}, but {expected} does not exist"
        )
    else:
        msg = (
            f"state snapshot missing: no file in {folder} covers key group {key_group} "
            f"(expected {expected}); the batch that wrote it committed, so the file was lost"
        )
    return CheckpointCorruptError(msg)
