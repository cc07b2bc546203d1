"""Where incremental checkpoints live: one operator's folder on any pyarrow filesystem.

::

    <location>/<operator>/
        _operator.json                         who owns this state (backend, query, key...)
        shared/<version>-<attempt>-000012.sst  SST files, uploaded once by the attempt making them
        v000000000007/
            0000-0063-<attempt>.json           the manifest of version 7, key groups 0-63
            0000-0063-<attempt>/MANIFEST-...   its private files (MANIFEST, CURRENT, OPTIONS)

Rules that keep a zombie or a retried attempt from damaging committed state:

* nothing is written in place: every upload is written whole or not at all
  (:meth:`firesteel.core.toolkit.Folder.output`) under a name unique to its
  attempt (a random attempt id), and the manifest, written last, is what makes
  a version exist;
* a shared file is reused by a later version only if the manifest the task
  restored from (a committed one) lists it: files of failed attempts are never
  picked up, even when their local names match;
* a shared file is deleted only when no retained version lists it and the
  version that uploaded it is older than every retained version (so a task
  still running, which only references its restored version's files and its
  own uploads, cannot lose one). Reference counts are recomputed from the
  retained manifests each time, so a crash between two deletions loses nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

from pyarrow import fs

from firesteel.backends.spi import KeyGroupRange
from firesteel.backends.toolkit import SnapshotStorage, read_stored
from firesteel.core.spi import CheckpointCorruptError
from firesteel.core.toolkit import Folder, StorageConfig
from firesteel.rocksdb.manifest import (
    SHARED_DIR,
    Manifest,
    ManifestRef,
    StoredFile,
    decode,
    parse_version_dir,
    shared_version,
    version_dir,
)

logger = logging.getLogger(__name__)

CHUNK = 1 << 20


def file_digest() -> Any:
    """The checksum of stored files: BLAKE2b-128."""
    return hashlib.blake2b(digest_size=16)


class CheckpointStorage:
    """Reads and writes the checkpoint files of one operator under ``location``.

    Picklable (the filesystem is created lazily). Manifests are immutable once
    written, so parsed ones are cached by path. ``config``: how to reach an
    object store (see :mod:`firesteel.core.storage`).
    """

    def __init__(self, location: str, operator: str, config: StorageConfig | None = None) -> None:
        self.location = location
        self.operator = operator
        self.config = config
        self.metadata = SnapshotStorage(location, operator, config=config)
        """Reads and writes ``_operator.json`` (shared with the dict backends' layout)."""
        self._manifests: dict[str, Manifest] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its settings: the receiving process opens its own filesystem.
        return type(self), (self.location, self.operator, self.config)

    @property
    def folder(self) -> Folder:
        """The operator's folder (the metadata's, resolved on first use)."""
        return self.metadata.folder

    @property
    def fs(self) -> fs.FileSystem:
        """The pyarrow filesystem (the metadata's, created on first use)."""
        return self.folder.fs

    @property
    def base(self) -> str:
        """The operator's folder on :attr:`fs`."""
        return self.metadata.base

    def path(self, relative: str) -> str:
        """The full path of a file given relative to the operator's folder."""
        return self.folder.path(relative)

    def describe(self, path: str) -> str:
        """A path as users should see it in messages (with the URI scheme when there is one)."""
        return self.metadata.describe(path)

    # -- listing ----------------------------------------------------------------------------

    def list_versions(self) -> dict[int, list[ManifestRef]]:
        """Every manifest, by version (the version folders only: ``shared/`` is not listed).
        Temporary and unknown files are ignored."""
        versions: dict[int, list[ManifestRef]] = {}
        for info in self.folder.entries():
            version = parse_version_dir(info.base_name)
            if version is not None and info.type == fs.FileType.Directory:
                refs = self.list_version(version)
                if refs:
                    versions[version] = refs
        return versions

    def list_version(self, version: int) -> list[ManifestRef]:
        """The manifests of one version."""
        return [ref for ref, _ in self._listed(version)]

    def _listed(self, version: int) -> list[tuple[ManifestRef, int]]:
        """The manifests of one version with their modification times (ns; 0 when unknown)."""
        listed = []
        for info in self.folder.entries(version_dir(version)):
            ref = ManifestRef.parse(version, info.path)
            if ref is not None and info.type == fs.FileType.File:
                listed.append((ref, info.mtime_ns or 0))
        return listed

    def read_manifest(self, ref: ManifestRef) -> Manifest:
        """Read and verify one manifest; a missing or damaged one names itself."""
        cached = self._manifests.get(ref.path)
        if cached is not None:
            return cached
        where = self.describe(ref.path)
        manifest = decode(read_stored(self.fs, ref.path, f"state manifest {where}"), where, ref)
        self._manifests[ref.path] = manifest
        return manifest

    def covering(self, version: int, key_groups: KeyGroupRange) -> list[Manifest]:
        """The manifests of ``version`` that together hold ``key_groups``, each key group once.

        A key group without a manifest means a committed file was lost; one in
        two manifests means a zombie attempt wrote after its batch was retried.
        Both are a :class:`CheckpointCorruptError` naming the folder or files.
        """
        refs = [r for r in self.list_version(version) if r.key_groups.overlaps(key_groups)]
        folder = self.describe(self.path(version_dir(version)))
        for key_group in key_groups:
            holding = [r for r in refs if key_group in r.key_groups]
            if not holding:
                msg = (
                    f"state checkpoint missing: no manifest in {folder} covers key group "
                    f"{key_group} (expected <start>-<end>-<attempt>.json); the batch that wrote "
                    "it committed, so the file was lost"
                )
                raise CheckpointCorruptError(msg)
            if len(holding) > 1:
                names = ", ".join(self.describe(r.path) for r in holding)
                msg = (
                    f"state of key group {key_group} at version {version} is in several "
                    f"manifests ({names}); a zombie task wrote after its batch was retried: "
                    "delete the one not named in the next version's parents"
                )
                raise CheckpointCorruptError(msg)
        return [self.read_manifest(ref) for ref in sorted(refs, key=lambda r: r.key_groups.start)]

    # -- files ------------------------------------------------------------------------------

    def upload(self, local: Path, relative: str) -> StoredFile:
        """Copy a local file to ``relative`` under the durability policy, checksumming it."""
        digest = file_digest()
        size = 0
        with local.open("rb") as source, self.folder.output(relative) as out:
            while chunk := source.read(CHUNK):
                digest.update(chunk)
                out.write(chunk)
                size += len(chunk)
        return StoredFile(local.name, relative, size, digest.hexdigest())

    def download(self, stored: StoredFile, target: Path, manifest: Manifest) -> None:
        """Copy a stored file to ``target`` (via a temporary name); refuse it unless its size
        and checksum are the manifest's. Errors name the file and the manifest."""
        source = self.path(stored.path)
        where = self.describe(source)
        needed_by = self.describe(self.path(manifest.relative_path))
        temporary = target.with_name(f".{target.name}.{os.getpid()}.part")
        digest = file_digest()
        size = 0
        try:
            with self.fs.open_input_stream(source) as stream, temporary.open("wb") as out:
                while chunk := stream.read(CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
        except FileNotFoundError as exc:
            temporary.unlink(missing_ok=True)
            msg = f"state file {where} is missing; the manifest {needed_by} needs it"
            raise CheckpointCorruptError(msg) from exc
        if size != stored.size or digest.hexdigest() != stored.digest:
            temporary.unlink(missing_ok=True)
            problem = (
                f"has {size} bytes, the manifest says {stored.size} (truncated?)"
                if size != stored.size
                else "failed its checksum (damaged)"
            )
            msg = f"state file {where} {problem}; needed by {needed_by}"
            raise CheckpointCorruptError(msg)
        temporary.rename(target)

    def write_manifest(self, manifest: Manifest) -> ManifestRef:
        """Write a manifest under the durability policy; the version exists once it is there."""
        relative = manifest.relative_path
        self.folder.write(relative, manifest.encode())
        ref = ManifestRef(
            manifest.version, manifest.key_groups, manifest.attempt, self.path(relative)
        )
        self._manifests[ref.path] = manifest
        return ref

    def remove_stale(self, written: Manifest) -> None:
        """Delete manifests of the same version that overlap ``written`` and were written
        before it: a failed attempt's leftovers (a re-run may use another parallelism, so
        ranges may differ). Their shared files become unreferenced and go with the next
        garbage collection.

        Only older ones: two attempts running at once (speculation, a zombie) must not
        delete each other's manifest and leave none. A newer overlapping one stays, and
        restoring the version then reports both by name. Older means an earlier
        modification time, or the same one and an earlier ``written_ns``: object stores
        date objects to the second, and a killed task's retry often writes within it.
        """
        listed = self._listed(written.version)
        own = [mtime for ref, mtime in listed if ref.attempt == written.attempt]
        if not own:
            return
        for ref, mtime in listed:
            if ref.attempt == written.attempt or not ref.key_groups.overlaps(written.key_groups):
                continue
            if mtime > own[0]:
                continue
            if mtime == own[0] and self.read_manifest(ref).written_ns >= written.written_ns:
                continue
            logger.info("state: removing a failed attempt's manifest %s", ref.path)
            key = self.folder.key_of(ref.path)
            self.folder.delete(key)
            self.folder.delete_folder(key[: -len(".json")])

    # -- retention --------------------------------------------------------------------------

    def collect_garbage(self, oldest_kept: int) -> tuple[int, int]:
        """Drop versions older than ``oldest_kept`` and every shared file no retained version
        lists that an attempt older than ``oldest_kept`` uploaded (see module docs).

        Returns (versions dropped, shared files deleted). A retained manifest that
        cannot be read stops the file collection (it would mis-count references);
        restoring that version reports the damage.
        """
        versions = self.list_versions()
        dropped = 0
        for version in sorted(versions):
            if version < oldest_kept:
                self.folder.delete_folder(version_dir(version))
                dropped += 1
        referenced: set[str] = set()
        try:
            for version, refs in versions.items():
                if version >= oldest_kept:
                    for ref in refs:
                        referenced.update(f.path for f in self.read_manifest(ref).shared_files)
        except CheckpointCorruptError as exc:
            logger.warning("state: not collecting unused files: %s", exc)
            return dropped, 0
        deleted = 0
        for info in self.folder.entries(SHARED_DIR):
            # Also the temporary file of an upload killed midway (".<name>.<random>.tmp").
            uploaded_by = shared_version(info.base_name.lstrip("."))
            relative = f"{SHARED_DIR}/{info.base_name}"
            if uploaded_by is None or uploaded_by >= oldest_kept or relative in referenced:
                continue
            self.folder.delete(relative)
            deleted += 1
        self._manifests = {
            path: m for path, m in self._manifests.items() if m.version >= oldest_kept
        }
        return dropped, deleted
