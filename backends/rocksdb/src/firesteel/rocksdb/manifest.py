"""The manifest of one incremental checkpoint: which files make up a version of a key-group range.

A manifest is a record in firesteel's one envelope
(:func:`firesteel.core.toolkit.encode_record`), versioned and checksummed::

    {"kind": "firesteel.rocksdb.manifest", "version": 1, "sha256": "...", "content": {
        "operator": "rank", "version": 7, "key_groups": [0, 63], "attempt": "9f2c...",
        "query_id": "...", "max_parallelism": 128,
        "states": {"count": {"kind": "value", "serializer": "msgpack"}},
        "files": [{"local": "000012.sst", "path": "shared/000000000005-1b7e...-000012.sst",
                   "size": 1048576, "digest": "<blake2b-128>"}, ...],
        "parents": ["v000000000006/0000-0063-77aa....json"]}}

``files`` lists every file of the RocksDB checkpoint: SST files under
``shared/`` (uploaded once, then referenced by every later version that still
holds them) and the small private files (``MANIFEST-*``, ``CURRENT``,
``OPTIONS-*``) under the manifest's own folder. ``parents`` names the
manifests the task restored from, for people reading a checkpoint.

Releases before the shared envelope spelled its ``version`` as ``format`` (same
content, same checksum); :func:`decode` still reads those manifests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from firesteel.backends.spi import KeyGroupRange
from firesteel.core.spi import CheckpointCorruptError
from firesteel.core.toolkit import decode_record, encode_record

KIND = "firesteel.rocksdb.manifest"
FORMAT = 1
"""Bump on any incompatible change; readers refuse other formats."""

SHARED_DIR = "shared"
_MANIFEST_NAME = re.compile(r"^(\d{4})-(\d{4})-([0-9a-f]{16})\.json$")
_VERSION_DIR = re.compile(r"^v(\d{12})$")
_SHARED_NAME = re.compile(r"^(\d{12})-([0-9a-f]{16})-(.+)$")


def version_dir(version: int) -> str:
    """``v000000000007`` for version 7 (the dict backends' spelling)."""
    return f"v{version:012d}"


def parse_version_dir(name: str) -> int | None:
    """The version a folder name stands for, or None."""
    match = _VERSION_DIR.match(name)
    return int(match.group(1)) if match else None


def shared_name(version: int, attempt: str, local: str) -> str:
    """The name of an SST file in ``shared/``: unique per attempt, never reused."""
    return f"{version:012d}-{attempt}-{local}"


def shared_version(name: str) -> int | None:
    """The version whose attempt uploaded the shared file ``name``, or None for a foreign file."""
    match = _SHARED_NAME.match(name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class ManifestRef:
    """A manifest as the listing shows it (nothing read yet)."""

    version: int
    key_groups: KeyGroupRange
    attempt: str
    path: str
    """Full path on the storage filesystem."""

    @property
    def name(self) -> str:
        """``0000-0063-<attempt>.json``."""
        return self.path.rsplit("/", 1)[-1]

    @classmethod
    def parse(cls, version: int, path: str) -> ManifestRef | None:
        """The reference a file at ``path`` in version ``version``'s folder stands for, or None."""
        match = _MANIFEST_NAME.match(path.rsplit("/", 1)[-1])
        if not match:
            return None
        start, end, attempt = match.groups()
        return cls(version, KeyGroupRange(int(start), int(end)), attempt, path)


def manifest_name(key_groups: KeyGroupRange, attempt: str) -> str:
    """The file name of a manifest."""
    return f"{key_groups.label}-{attempt}.json"


@dataclass(frozen=True)
class StoredFile:
    """One file of a checkpoint in storage."""

    local: str
    """Its name in the RocksDB checkpoint folder."""
    path: str
    """Where it is, relative to the operator's folder."""
    size: int
    digest: str
    """BLAKE2b-128, hex."""

    @property
    def shared(self) -> bool:
        """Whether it lives in ``shared/`` (an SST file other versions may reference)."""
        return self.path.startswith(f"{SHARED_DIR}/")


@dataclass(frozen=True)
class Manifest:
    """One version of one key-group range (see module docs)."""

    operator: str
    version: int
    key_groups: KeyGroupRange
    attempt: str
    query_id: str
    max_parallelism: int
    states: dict[str, dict[str, str]]
    files: tuple[StoredFile, ...]
    parents: tuple[str, ...] = field(default=())
    written_ns: int = 0
    """When its attempt began writing it (``time.time_ns()`` on the executor): orders two
    attempts whose files a store dates to the same second."""

    @property
    def name(self) -> str:
        """The manifest's file name."""
        return manifest_name(self.key_groups, self.attempt)

    @property
    def relative_path(self) -> str:
        """Where it lives, relative to the operator's folder."""
        return f"{version_dir(self.version)}/{self.name}"

    @property
    def private_dir(self) -> str:
        """The folder of its private files, relative to the operator's folder."""
        return f"{version_dir(self.version)}/{self.key_groups.label}-{self.attempt}"

    @property
    def shared_files(self) -> list[StoredFile]:
        """Its SST files (in ``shared/``)."""
        return [f for f in self.files if f.shared]

    def encode(self) -> bytes:
        """The manifest file's bytes."""
        content = {
            "operator": self.operator,
            "version": self.version,
            "key_groups": [self.key_groups.start, self.key_groups.end],
            "attempt": self.attempt,
            "query_id": self.query_id,
            "max_parallelism": self.max_parallelism,
            "states": self.states,
            "files": [
                {"local": f.local, "path": f.path, "size": f.size, "digest": f.digest}
                for f in self.files
            ],
            "parents": list(self.parents),
            "written_ns": self.written_ns,
        }
        return encode_record(KIND, FORMAT, content)


def decode(data: bytes, where: str, ref: ManifestRef) -> Manifest:
    """Verify and decode a manifest file; every failure names ``where``."""
    content: Any = decode_record(data, f"state manifest {where}", KIND, (FORMAT,))
    try:
        manifest = Manifest(
            operator=content["operator"],
            version=int(content["version"]),
            key_groups=KeyGroupRange(*content["key_groups"]),
            attempt=content["attempt"],
            query_id=content["query_id"],
            max_parallelism=int(content["max_parallelism"]),
            states=content["states"],
            files=tuple(
                StoredFile(f["local"], f["path"], int(f["size"]), f["digest"])
                for f in content["files"]
            ),
            parents=tuple(content["parents"]),
            written_ns=int(content["written_ns"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        msg = f"state manifest {where}: missing or malformed field ({exc})"
        raise CheckpointCorruptError(msg) from exc
    if (manifest.version, manifest.key_groups, manifest.attempt) != (
        ref.version,
        ref.key_groups,
        ref.attempt,
    ):
        msg = (
            f"state manifest {where} describes version {manifest.version} key groups "
            f"{manifest.key_groups.label} attempt {manifest.attempt}, not what its path says "
            "(renamed or copied?)"
        )
        raise CheckpointCorruptError(msg)
    return manifest
