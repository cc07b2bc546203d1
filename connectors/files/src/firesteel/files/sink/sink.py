"""The transactional file sink: two-phase commit by pending files, a manifest and renames.

Protocol for micro-batch N (Flink's TwoPhaseCommitSinkFunction, Beam's finalize):

1. Tasks (executors) write in-progress files to
   ``<out>/_firesteel/pending/<sink>/<N>/<partition>-<attempt>-<n>-<run token>.<ext>``,
   invisible to readers (``_`` prefix).
2. :meth:`FilesSink.pre_commit` closes and fsyncs them and votes with the
   handle ``{"files": [{path, pending, rows, bytes}, ...]}``.
3. :meth:`FilesSink.commit` (driver, once every task voted):

   a. if ``manifests/<sink>/<N>.json`` exists, batch N was committed by an
      earlier attempt: roll its renames forward, delete the new handles'
      pending files, stop;
   b. otherwise write the manifest atomically (this *is* the commit point);
      fault point ``driver.mid_commit``;
   c. rename each pending file to its final name (idempotent finalize);
   d. delete whatever else is left in ``pending/<sink>/<N>/`` (other attempts);
   e. every ``COMPACT_EVERY`` batches, fold the manifests so far into one
      compact record (:func:`~firesteel.files.sink.manifest.compact`); a
      batch a compact record covers counts as committed like one with a
      manifest.

4. :meth:`FilesSink.recover` (in ``prepare``, before the first batch of a run)
   rolls forward every batch that has a manifest and pending files left, and
   deletes pending folders of older batches without one; a crashed attempt of
   a newer batch is cleaned up when Spark's re-run of it commits (step 3d).

Final names are deterministic from (sink id, batch, partition, n), and a batch
is published from exactly one manifest, so a re-run can never add a second copy.

The default sink id follows the output path, and the first query to write
owns it (:meth:`FilesSink._claim`): the same job restarted on a new
checkpoint, whose batch ids start again at 0, is refused instead of writing
every batch twice, unless option ``sink.new.stream`` says it is a new stream.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from firesteel.core.spi import MID_COMMIT, ConfigError, Ownership, TaskScope, TwoPhaseCommitSink
from firesteel.files.sink.manifest import (
    COMPACT_EVERY,
    CommittedFile,
    FileCommittable,
    Manifest,
    committed_through,
    compact,
    finalize,
    manifest_path,
    read_manifest,
    write_manifest,
)
from firesteel.files.sink.paths import (
    FIRESTEEL_DIR,
    manifest_dir,
    pending_dir,
    valid_sink_id,
)
from firesteel.files.sink.writer import TaskWriter, WriterConfig

logger = logging.getLogger(__name__)


class FilesSink(TwoPhaseCommitSink[TaskWriter, FileCommittable]):
    """Exactly-once Parquet / JSON-lines output with per-batch manifests (see module docs)."""

    name = "firesteel.files"
    committable_type = FileCommittable

    def __init__(self, config: WriterConfig, schema: pa.Schema | None = None) -> None:
        if not valid_sink_id(config.sink_id):
            msg = (
                f"option 'sink.id': {config.sink_id!r} may only contain letters, digits, "
                "'.', '_' and '-' (it names files)"
            )
            raise ConfigError(msg)
        self.config = config
        self.sink_id = config.sink_id
        self.schema = schema
        self.out = Path(config.out)

    # -- driver: before the first batch -------------------------------------------

    def prepare(self) -> None:
        """Check that ``path`` is writable, then recover what a crashed run left."""
        probe = self.out / FIRESTEEL_DIR / f".probe-{uuid.uuid4().hex}"
        try:
            probe.parent.mkdir(parents=True, exist_ok=True)
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            msg = (
                f"option 'path': the output folder {self.out} is not writable ({exc}); "
                "create it with write permission or choose another path"
            )
            raise ConfigError(msg) from exc
        self._claim()
        super().prepare()

    def _claim(self) -> None:
        """Refuse a sink id whose committed batches another query (checkpoint) wrote.

        The id's owner record is ``_firesteel/owners/<id>.json``
        (:meth:`~firesteel.core.spi.Ownership.claim`); the owner has committed
        once it has a manifest. The default id follows the output path (see
        :func:`firesteel.core.spi.default_sink_id`), so this also catches the
        same job restarted on a new checkpoint.
        """
        manifests = self.out / manifest_dir(self.sink_id)
        Ownership(
            subject=f"firesteel.files: sink {self.sink_id!r} in {self.out}",
            query_id=self.config.query_id,
            remedy="Restart from the owner's checkpoint; or, if this is a new stream into "
            f"{self.out} on purpose, set option 'sink.new.stream' to true (with an "
            "explicit 'sink.id': give it a new one)",
        ).claim(
            self.out / FIRESTEEL_DIR / "owners" / f"{self.sink_id}.json",
            owner_committed=lambda: (
                manifests.is_dir() and next(manifests.iterdir(), None) is not None
            ),
        )

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
        number of batches.
        """
        pending_root = self.out / FIRESTEEL_DIR / "pending" / self.sink_id
        if not pending_root.is_dir():
            return
        through = committed_through(self.out, self.sink_id)
        for folder in sorted(pending_root.iterdir()):
            if not folder.name.isdigit():
                continue
            batch_id = int(folder.name)
            path = manifest_path(self.out, self.sink_id, batch_id)
            if batch_id <= through:
                logger.info(
                    "firesteel.files: sink %s discarding leftover files of batch %d",
                    self.sink_id,
                    batch_id,
                )
            elif path.exists():
                renamed = finalize(self.out, read_manifest(path))
                logger.warning(
                    "firesteel.files: sink %s recovered batch %d (%d renames rolled forward)",
                    self.sink_id,
                    batch_id,
                    renamed,
                )
            elif (
                batch_id + 1 <= through
                or manifest_path(self.out, self.sink_id, batch_id + 1).exists()
            ):
                logger.info(
                    "firesteel.files: sink %s discarding uncommitted files of batch %d",
                    self.sink_id,
                    batch_id,
                )
            else:
                continue
            shutil.rmtree(folder, ignore_errors=True)

    # -- executors ------------------------------------------------------------------

    def begin_transaction(self, scope: TaskScope) -> TaskWriter:
        return TaskWriter(self.config, scope, self.schema)

    def write(self, txn: TaskWriter, batch: pa.RecordBatch) -> None:
        txn.write(batch)

    def pre_commit(self, txn: TaskWriter) -> FileCommittable:
        return FileCommittable(tuple(txn.close()))

    def abort_transaction(self, txn: TaskWriter) -> None:
        txn.discard()

    # -- driver: per batch ----------------------------------------------------------

    def commit(self, batch_id: int, handles: Sequence[FileCommittable]) -> None:
        files = tuple(f for handle in handles for f in handle.files)
        if batch_id <= committed_through(self.out, self.sink_id):
            self._discard_rerun(batch_id, files)
            return
        path = manifest_path(self.out, self.sink_id, batch_id)
        if path.exists():
            self._roll_forward(batch_id, read_manifest(path), files)
            return
        manifest = Manifest(self.sink_id, batch_id, files)
        if not write_manifest(self.out, manifest):
            self._roll_forward(batch_id, read_manifest(path), files)
            return
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

    def _roll_forward(
        self, batch_id: int, manifest: Manifest, new_files: Sequence[CommittedFile]
    ) -> None:
        """Batch already committed: finish its renames, discard the re-run's files."""
        finalize(self.out, manifest)
        kept = {f.pending for f in manifest.files}
        for item in new_files:
            if item.pending not in kept:
                (self.out / item.pending).unlink(missing_ok=True)
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
            (self.out / item.pending).unlink(missing_ok=True)
        self._drop_pending(batch_id)
        logger.warning(
            "firesteel.files: sink %s batch %d was committed before the last compaction; "
            "discarded %d files of the re-run",
            self.sink_id,
            batch_id,
            len(new_files),
        )

    def _drop_pending(self, batch_id: int) -> None:
        shutil.rmtree(self.out / pending_dir(self.sink_id, batch_id), ignore_errors=True)

    def abort(self, batch_id: int, handles: Sequence[FileCommittable]) -> None:
        path = manifest_path(self.out, self.sink_id, batch_id)
        kept = {f.pending for f in read_manifest(path).files} if path.exists() else set()
        for handle in handles:
            for item in handle.files:
                if item.pending not in kept:
                    (self.out / item.pending).unlink(missing_ok=True)
