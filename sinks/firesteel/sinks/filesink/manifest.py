"""The per-batch manifest of the file sink, and the idempotent finalize that publishes it.

``<out>/_firesteel/manifests/<sink>/<N>.json`` is written atomically (temporary
name, fsync, rename) with a format version and a SHA-256 of its content. Its
existence *is* the commit of batch N: it lists every file the batch publishes,
with the pending file each one is renamed from. Renames that a crash
interrupts are rolled forward from it (:func:`finalize`), and a re-run of a
committed batch finds it and keeps its files instead of the re-run's.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from firesteel.core.durable import create_record, fsync_dir, read_record
from firesteel.core.errors import CheckpointCorruptError
from firesteel.core.sink import Committable
from firesteel.sinks.filesink.paths import manifest_dir

logger = logging.getLogger(__name__)

MANIFEST_FORMAT_VERSION = 1
MANIFEST_KIND = "sink-manifest"


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
    content = {
        "sink_id": manifest.sink_id,
        "batch_id": manifest.batch_id,
        "files": [asdict(f) for f in manifest.files],
    }
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


def list_manifests(out: Path) -> list[Path]:
    """Every manifest under ``<out>`` (all sink ids), ordered by sink id and batch."""
    root = out / "_firesteel" / "manifests"
    if not root.is_dir():
        return []
    found = []
    for sink_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        batches = [p for p in sink_dir.glob("*.json") if p.stem.isdigit()]
        found.extend(sorted(batches, key=lambda p: int(p.stem)))
    return found


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
