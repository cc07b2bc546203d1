"""The per-batch manifest of the file sink, and the idempotent finalize that publishes it.

``<out>/_firesteel/manifests/<sink>/<N>.json`` is written whole or not at all
(locally: temporary name, fsync, hard link; on an object store: one PUT under
its final key) with a format version and a SHA-256 of its content. Its
existence *is* the commit of batch N: it lists every file the batch publishes,
with the pending file each one is moved from. Moves that a crash interrupts
are rolled forward from it (:func:`finalize`), and a re-run of a committed
batch finds it and keeps its files instead of the re-run's.

Compaction keeps the folder small, as Spark's file sink compacts its metadata
log: every :data:`COMPACT_EVERY` batches, once batch N is finalized,
``<N>.compact.json`` folds the previous compact file and every manifest up to
N into one record, and those are deleted (all of their files are in place by
then, so nothing needs rolling forward). Batch N is committed when its
manifest exists or a compact file covers it (:func:`committed_through`).
Readers take the newest compact file plus the manifests after it
(:func:`committed_manifests`), and list again if a compaction deleted a file
under them. Listing the folder costs one LIST request on an object store: it
never holds more than :data:`COMPACT_EVERY` manifests and two compact files.
The compact record itself grows by every batch committed (about 350 bytes a
batch of two files), as Spark's compacted metadata log does: each compaction
reads and writes a larger object, in the same number of requests (a record
is read in one GET, :func:`firesteel.core.toolkit.read_record`).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from firesteel.core.spi import CheckpointCorruptError, Committable
from firesteel.core.toolkit import Folder, create_record, read_record
from firesteel.files.sink.paths import OUTPUT_RECORDS_DIR, manifest_dir

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


def manifest_key(sink_id: str, batch_id: int) -> str:
    """Where batch ``batch_id``'s manifest lives (relative to ``<out>``)."""
    return f"{manifest_dir(sink_id)}/{batch_id}.json"


def write_manifest(out: Folder, manifest: Manifest) -> bool:
    """Create the manifest atomically; False if one already exists (it is kept)."""
    content = {"sink_id": manifest.sink_id, **_manifest_content(manifest)}
    key = manifest_key(manifest.sink_id, manifest.batch_id)
    return create_record(
        out.uri_of(key), MANIFEST_KIND, MANIFEST_FORMAT_VERSION, content, out.config
    )


def read_manifest(out: Folder, key: str) -> Manifest:
    """Load and verify one manifest file."""
    content = read_record(out.uri_of(key), MANIFEST_KIND, (MANIFEST_FORMAT_VERSION,), out.config)
    return Manifest(
        sink_id=str(content["sink_id"]),
        batch_id=int(content["batch_id"]),
        files=tuple(CommittedFile(**f) for f in content["files"]),
    )


def _manifest_content(manifest: Manifest) -> dict[str, Any]:
    return {"batch_id": manifest.batch_id, "files": [asdict(f) for f in manifest.files]}


def _listing(out: Folder, folder: str) -> tuple[dict[int, str], dict[int, str]]:
    """The batch manifests and the compact files in ``folder``, by batch: one listing."""
    singles: dict[int, str] = {}
    compacts: dict[int, str] = {}
    for name in out.names(folder):
        number = name.removesuffix(_COMPACT_SUFFIX)
        if number != name and number.isdigit():
            compacts[int(number)] = f"{folder}/{name}"
            continue
        stem = name.removesuffix(".json")
        if stem != name and stem.isdigit():
            singles[int(stem)] = f"{folder}/{name}"
    return singles, compacts


def committed_through(out: Folder, sink_id: str) -> int:
    """The newest batch a compact file covers (every batch up to it committed); -1 if none."""
    return max(_listing(out, manifest_dir(sink_id))[1], default=-1)


def _read_compact(out: Folder, key: str, sink_id: str) -> list[Manifest]:
    content = read_record(out.uri_of(key), COMPACT_KIND, (COMPACT_FORMAT_VERSION,), out.config)
    return [
        Manifest(sink_id, int(m["batch_id"]), tuple(CommittedFile(**f) for f in m["files"]))
        for m in content["batches"]
    ]


def compact(out: Folder, sink_id: str, batch_id: int) -> int:
    """Fold the manifests up to ``batch_id`` (all finalized) into one record; delete them.

    Returns how many manifest files it folded. Safe to repeat and to crash in:
    the compact file is created atomically before anything is deleted, and
    readers ignore manifests and older compact files it covers.
    """
    folder = manifest_dir(sink_id)
    singles, compacts = _listing(out, folder)
    previous = max((n for n in compacts if n <= batch_id), default=-1)
    batches = _read_compact(out, compacts[previous], sink_id) if previous >= 0 else []
    folded = sorted(n for n in singles if previous < n <= batch_id)
    batches.extend(read_manifest(out, singles[n]) for n in folded)
    content = {
        "sink_id": sink_id,
        "batch_id": batch_id,
        "batches": [_manifest_content(m) for m in batches],
    }
    create_record(
        out.uri_of(f"{folder}/{batch_id}{_COMPACT_SUFFIX}"),
        COMPACT_KIND,
        COMPACT_FORMAT_VERSION,
        content,
        out.config,
    )
    for number, key in singles.items():
        if number <= batch_id:
            out.delete(key)
    for number, key in compacts.items():
        if number < batch_id:
            out.delete(key)
    return len(folded)


def committed_manifests(out: Folder) -> list[Manifest]:
    """Every committed batch under ``<out>`` (all sink ids), ordered by sink id and batch."""
    root = f"{OUTPUT_RECORDS_DIR}/manifests"
    found: list[Manifest] = []
    for sink_id in out.names(root):
        found.extend(_sink_manifests(out, sink_id))
    return found


def _sink_manifests(out: Folder, sink_id: str) -> list[Manifest]:
    folder = manifest_dir(sink_id)
    for attempt in range(_READ_ATTEMPTS):
        singles, compacts = _listing(out, folder)
        through = max(compacts, default=-1)
        try:
            found = _read_compact(out, compacts[through], sink_id) if through >= 0 else []
            found.extend(read_manifest(out, singles[n]) for n in sorted(singles) if n > through)
        except FileNotFoundError:
            # A compaction deleted what was listed: list again.
            logger.debug("manifests of %s changed while reading (attempt %d)", folder, attempt)
            continue
        return found
    msg = f"{out.uri_of(folder)}: manifests kept changing while being read; is a compaction stuck?"
    raise CheckpointCorruptError(msg)


def finalize(out: Folder, manifest: Manifest) -> int:
    """Move every pending file of ``manifest`` into place; safe to run any number of times.

    Beam's idempotent finalize, per file: destination present -> done (it is
    never overwritten); source only -> move (a rename locally, a server-side
    copy then delete on an object store). Neither present means committed data
    is lost: that raises.
    Returns how many moves it did.
    """
    renamed = 0
    touched: set[str] = set()
    for item in manifest.files:
        if out.exists(item.path):
            # A rename and an object copy are atomic, so the target is the committed
            # file. A file at the pending key now is either this batch's copy source
            # (a crash between copy and delete) or a re-run's: the pending-folder
            # cleanup removes it; it is never published over the target.
            continue
        if not out.exists(item.pending):
            msg = (
                f"batch {manifest.batch_id} of sink {manifest.sink_id} lists "
                f"{out.uri_of(item.path)}, but neither it nor its pending file "
                f"{out.uri_of(item.pending)} exists: committed output was deleted outside "
                "firesteel"
            )
            raise CheckpointCorruptError(msg)
        out.move(item.pending, item.path)
        touched.add(item.path.rpartition("/")[0])
        renamed += 1
    for folder in touched:
        out.sync(folder)
    if renamed:
        logger.info(
            "firesteel.files: sink %s batch %d: published %d files",
            manifest.sink_id,
            manifest.batch_id,
            renamed,
        )
    return renamed
