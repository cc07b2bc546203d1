"""The driver half of the file sink (Sink V2's committer): manifest, finalize, cleanup.

See :mod:`firesteel.files.sink.sink` for the protocol and its crash windows.
Every method is idempotent: a commit repeated after a crash, or a re-run of a
batch an earlier attempt committed, keeps the first result and discards the
new files.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from firesteel.core.faults import MID_COMMIT
from firesteel.core.spi import CommitOutcome, Committer
from firesteel.files.sink.manifest import (
    COMPACT_EVERY,
    CommittedFile,
    FileCommittable,
    Manifest,
    committed_through,
    compact,
    finalize,
    manifest_key,
    read_manifest,
    write_manifest,
)
from firesteel.files.sink.paths import OUTPUT_RECORDS_DIR, pending_dir
from firesteel.files.sink.writer import WriterConfig

logger = logging.getLogger(__name__)


class FilesCommitter(Committer[FileCommittable]):
    """Publishes a batch's pending files: the manifest is the commit, the moves follow it."""

    def __init__(self, config: WriterConfig) -> None:
        self.config = config
        self.sink_id = config.sink_id
        self.out = config.output

    def recover(self) -> None:
        """Roll forward committed batches; drop pending files nobody will commit.

        Spark builds the writer again in the Python process that runs each
        batch's commit, so this also runs right before ``commit(N)`` while
        batch N's pending files wait to be published: it must keep the pending
        folder of a batch that has not committed. That is either the batch
        about to commit or a crashed attempt that Spark re-runs (its leftovers
        go when that batch commits); once batch N+1 has committed, Spark never
        runs N again and its folder goes. Only the pending folders (one or two)
        and their manifests are looked at, so the cost does not grow with the
        number of batches: one listing of ``pending/<sink>/``, one of the
        manifest folder, and one existence check per pending batch.
        """
        pending_root = f"{OUTPUT_RECORDS_DIR}/pending/{self.sink_id}"
        batches = sorted(int(name) for name in self.out.names(pending_root) if name.isdigit())
        if not batches:
            return
        through = committed_through(self.out, self.sink_id)
        for batch_id in batches:
            key = manifest_key(self.sink_id, batch_id)
            if batch_id <= through:
                logger.info(
                    "firesteel.files: sink %s discarding leftover files of batch %d",
                    self.sink_id,
                    batch_id,
                )
            elif self.out.exists(key):
                renamed = finalize(self.out, read_manifest(self.out, key))
                logger.warning(
                    "firesteel.files: sink %s recovered batch %d (%d moves rolled forward)",
                    self.sink_id,
                    batch_id,
                    renamed,
                )
            elif batch_id + 1 <= through or self.out.exists(
                manifest_key(self.sink_id, batch_id + 1)
            ):
                logger.info(
                    "firesteel.files: sink %s discarding uncommitted files of batch %d",
                    self.sink_id,
                    batch_id,
                )
            else:
                continue
            self._drop_pending(batch_id)

    def commit(self, batch_id: int, handles: Sequence[FileCommittable]) -> CommitOutcome:
        files = tuple(f for handle in handles for f in handle.files)
        if batch_id <= committed_through(self.out, self.sink_id):
            self._discard_rerun(batch_id, files)
            return CommitOutcome.ALREADY_COMMITTED
        manifest = Manifest(self.sink_id, batch_id, files)
        if not write_manifest(self.out, manifest):
            key = manifest_key(self.sink_id, batch_id)
            self._roll_forward(batch_id, read_manifest(self.out, key), files)
            return CommitOutcome.ALREADY_COMMITTED
        MID_COMMIT.fire(batch_id)
        finalize(self.out, manifest)
        self._drop_pending(batch_id)
        if (batch_id + 1) % COMPACT_EVERY == 0:
            folded = compact(self.out, self.sink_id, batch_id)
            logger.info(
                "firesteel.files: sink %s compacted %d manifests through batch %d",
                self.sink_id,
                folded,
                batch_id,
            )
        logger.info(
            "firesteel.files: sink %s committed batch %d: %d files, %d rows",
            self.sink_id,
            batch_id,
            len(files),
            manifest.rows,
        )
        return CommitOutcome.COMMITTED

    def _roll_forward(
        self, batch_id: int, manifest: Manifest, new_files: Sequence[CommittedFile]
    ) -> None:
        """Batch already committed: finish its moves, discard the re-run's files."""
        finalize(self.out, manifest)
        kept = {f.pending for f in manifest.files}
        for item in new_files:
            if item.pending not in kept:
                self.out.delete(item.pending)
        self._drop_pending(batch_id)
        logger.warning(
            "firesteel.files: sink %s batch %d was already committed; kept its %d files and "
            "discarded %d files of the re-run",
            self.sink_id,
            batch_id,
            len(manifest.files),
            len(new_files),
        )

    def _discard_rerun(self, batch_id: int, new_files: Sequence[CommittedFile]) -> None:
        """Batch committed and compacted long ago (every file final): drop the re-run's."""
        for item in new_files:
            self.out.delete(item.pending)
        self._drop_pending(batch_id)
        logger.warning(
            "firesteel.files: sink %s batch %d was committed before the last compaction; "
            "discarded %d files of the re-run",
            self.sink_id,
            batch_id,
            len(new_files),
        )

    def _drop_pending(self, batch_id: int) -> None:
        self.out.delete_folder(pending_dir(self.sink_id, batch_id))

    def abort(self, batch_id: int, handles: Sequence[FileCommittable]) -> None:
        key = manifest_key(self.sink_id, batch_id)
        kept = (
            {f.pending for f in read_manifest(self.out, key).files}
            if self.out.exists(key)
            else set()
        )
        for handle in handles:
            for item in handle.files:
                if item.pending not in kept:
                    self.out.delete(item.pending)
