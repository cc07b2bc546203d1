"""The per-batch manifest of the file sink, and the idempotent finalize that publishes it.

``<out>/_firesteel/manifests/<sink>/<N>.json`` is written atomically (temporary
name, fsync, rename) with a format version and a SHA-256 of its content. Its
existence *is* the commit of batch N: it lists every file the batch publishes,
with the pending file each one is renamed from. Renames that a crash
interrupts are rolled forward from it (:func:`finalize`), and a re-run of a
committed batch finds it and keeps its files instead of the re-run's.

Compaction keeps the folder small, as Spark's file sink compacts its metadata
log: every :data:`COMPACT_EVERY` batches, once batch N is finalized,
``<N>.compact.json`` folds the previous compact file and every manifest up to
N into one record, and those are deleted (all of their files are renamed into
place by then, so nothing needs rolling forward). Batch N is committed when its
manifest exists or a compact file covers it (:func:`committed_through`).
Readers take the newest compact file plus the manifests after it
(:func:`committed_manifests`), and list again if a compaction deleted a file
under them.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from firesteel.core.spi import (
    CheckpointCorruptError,
    Committable,
    create_record,
    fsync_dir,
    read_record,
)
from firesteel.files.sink.paths import FIRESTEEL_DIR, manifest_dir

logger = logging.getLogger(__name__)

MANIFEST_FORMAT_VERSION = 1
MANIFEST_KIND = "sink-manifest"
COMPACT_KIND = "sink-manifest-compact"
COMPACT_FORMAT_VERSION = 1
COMPACT_EVERY = 10
"""Batches between compactions of the manifest folder."""
_COMPACT_SUFFIX = ".compact.json"
_READ_ATTEMPTS = 5


@dataclass(frozen=True)
class CommittedFile:
    """One file of a batch: final path and pending path (both relative to ``<out>``)."""

    path: str
    pending: str
    rows: int
    bytes: int


@dataclass(frozen=True)
class FileCommittable(Committable):
    """A task's vote: the pending files it wrote and closed durably."""

    files: tuple[CommittedFile, ...]


@dataclass(frozen=True)
class Manifest:
    """What batch ``batch_id`` of sink ``sink_id`` committed."""

    sink_id: str
    batch_id: int
    files: tuple[CommittedFile, ...]

    @property
    def rows(self) -> int:
        """Rows the batch committed."""
        return sum(f.rows for f in self.files)


def manifest_path(out: Path, sink_id: str, batch_id: int) -> Path:
    """Where batch ``batch_id``'s manifest lives."""
    return out / manifest_dir(sink_id) / f"{batch_id}.json"


def write_manifest(out: Path, manifest: Manifest) -> bool:
    """Create the manifest atomically; False if one already exists (it is kept)."""
    content = {"sink_id": manifest.sink_id, **_manifest_content(manifest)}
    path = manifest_path(out, manifest.sink_id, manifest.batch_id)
    return create_record(path, MANIFEST_KIND, MANIFEST_FORMAT_VERSION, content)


def read_manifest(path: Path) -> Manifest:
    """Load and verify one manifest file."""
    content = read_record(path, MANIFEST_KIND, (MANIFEST_FORMAT_VERSION,))
    return Manifest(
        sink_id=str(content["sink_id"]),
        batch_id=int(content["batch_id"]),
        files=tuple(CommittedFile(**f) for f in content["files"]),
    )


def _manifest_content(manifest: Manifest) -> dict[str, Any]:
    return {"batch_id": manifest.batch_id, "files": [asdict(f) for f in manifest.files]}


def _batch_manifests(folder: Path) -> dict[int, Path]:
    return {int(p.stem): p for p in folder.glob("*.json") if p.stem.isdigit()}


def _compacts(folder: Path) -> dict[int, Path]:
    found = {}
    for path in folder.glob(f"*{_COMPACT_SUFFIX}"):
        number = path.name.removesuffix(_COMPACT_SUFFIX)
        if number.isdigit():
            found[int(number)] = path
    return found


def committed_through(out: Path, sink_id: str) -> int:
    """The newest batch a compact file covers (every batch up to it committed); -1 if none."""
    return max(_compacts(out / manifest_dir(sink_id)), default=-1)


def _read_compact(path: Path, sink_id: str) -> list[Manifest]:
    content = read_record(path, COMPACT_KIND, (COMPACT_FORMAT_VERSION,))
    return [
        Manifest(sink_id, int(m["batch_id"]), tuple(CommittedFile(**f) for f in m["files"]))
        for m in content["batches"]
    ]


def compact(out: Path, sink_id: str, batch_id: int) -> int:
    """Fold the manifests up to ``batch_id`` (all finalized) into one record; delete them.

    Returns how many manifest files it folded. Safe to repeat and to crash in:
    the compact file is created atomically before anything is deleted, and
    readers ignore manifests and older compact files it covers.
    """
    folder = out / manifest_dir(sink_id)
    compacts = _compacts(folder)
    previous = max((n for n in compacts if n <= batch_id), default=-1)
    batches = _read_compact(compacts[previous], sink_id) if previous >= 0 else []
    singles = _batch_manifests(folder)
    folded = sorted(n for n in singles if previous < n <= batch_id)
    batches.extend(read_manifest(singles[n]) for n in folded)
    content = {
        "sink_id": sink_id,
        "batch_id": batch_id,
        "batches": [_manifest_content(m) for m in batches],
    }
    create_record(
        folder / f"{batch_id}{_COMPACT_SUFFIX}", COMPACT_KIND, COMPACT_FORMAT_VERSION, content
    )
    for number, path in singles.items():
        if number <= batch_id:
            path.unlink(missing_ok=True)
    for number, path in compacts.items():
        if number < batch_id:
            path.unlink(missing_ok=True)
    return len(folded)


def committed_manifests(out: Path) -> list[Manifest]:
    """Every committed batch under ``<out>`` (all sink ids), ordered by sink id and batch."""
    root = out / FIRESTEEL_DIR / "manifests"
    if not root.is_dir():
        return []
    found: list[Manifest] = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        found.extend(_sink_manifests(folder))
    return found


def _sink_manifests(folder: Path) -> list[Manifest]:
    for attempt in range(_READ_ATTEMPTS):
        compacts = _compacts(folder)
        through = max(compacts, default=-1)
        try:
            found = _read_compact(compacts[through], folder.name) if through >= 0 else []
            singles = _batch_manifests(folder)
            found.extend(read_manifest(singles[n]) for n in sorted(singles) if n > through)
        except FileNotFoundError:
            # A compaction deleted what was listed: list again.
            logger.debug("manifests of %s changed while reading (attempt %d)", folder, attempt)
            continue
        return found
    msg = f"{folder}: manifests kept changing while being read; is a compaction stuck?"
    raise CheckpointCorruptError(msg)


def finalize(out: Path, manifest: Manifest) -> int:
    """Rename every pending file of ``manifest`` into place; safe to run any number of times.

    Beam's idempotent finalize, per file: destination present -> done (it is
    never overwritten); source only -> rename. Neither present means committed
    data is lost: that raises.
    Returns how many renames it did.
    """
    renamed = 0
    touched: set[Path] = set()
    for item in manifest.files:
        source, target = out / item.pending, out / item.path
        if target.exists():
            # Renames are atomic, so the target is the committed file. A file
            # at the pending path now is a re-run's, never this batch's: leave
            # it to the pending-folder cleanup, never publish it over the target.
            continue
        if not source.exists():
            msg = (
                f"batch {manifest.batch_id} of sink {manifest.sink_id} lists {target}, but "
                f"neither it nor its pending file {source} exists: committed output was "
                "deleted outside firesteel"
            )
            raise CheckpointCorruptError(msg)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, target)
        touched.add(target.parent)
        renamed += 1
    for folder in touched:
        fsync_dir(folder)
    if renamed:
        logger.info(
            "firesteel.files: sink %s batch %d: published %d files",
            manifest.sink_id,
            manifest.batch_id,
            renamed,
        )
    return renamed
