"""The transactional file sink: pending objects, a manifest as the commit, idempotent moves.

Works the same on a local folder and on an object store (``s3a://bucket/prefix``,
``gs://``, ``abfs://``: any location :mod:`firesteel.core.storage` resolves,
reached with the sink's ``fs.*`` options over the session's
``spark.hadoop.fs.*`` settings). Object stores have no rename, no folders and
no atomic multi-object operation; what they do have is a PUT that makes one
object visible whole or not at all, and a server-side copy that does the same.

The decision, from what object-store committers do:

* Spark's ``_spark_metadata`` log: a per-batch log record is the commit, and
  only a reader that follows the log is exact while a batch is half published.
  We keep that record (the manifest) but do not make plain readers depend on
  it: pyarrow, DuckDB and Spark's plain parquet reader ignore
  ``_spark_metadata`` at a sub-path.
* The S3A magic committer: tasks upload to a hidden prefix and the job commit
  makes the data visible under its final names, driven by a manifest of what
  tasks uploaded. Its multipart-upload completion cannot be reproduced through
  pyarrow (no API to complete another process's upload), so our tasks finish
  their uploads into ``_firesteel/pending/`` and publishing is a server-side
  copy to the final key, then a delete (Beam's idempotent finalize).
* Manifests (Delta, Iceberg): the commit point is one atomic PUT of a small
  record naming every file, which needs no listing of data to read back.

Protocol for micro-batch N (Flink's TwoPhaseCommitSinkFunction, Sink V2's
writer and committer halves: :class:`~firesteel.files.sink.writer.FilesWriter`
and :class:`~firesteel.files.sink.committer.FilesCommitter`):

1. Tasks write ``<out>/_firesteel/pending/<sink>/<N>/<partition>-<attempt>-<n>-<run token>.<ext>``
   (on an object store each file is one upload, an object only once its last
   request completed; ``_`` hides the prefix from plain readers).
2. ``pre_commit`` closes them (locally: fsync) and votes with the typed
   committable ``FileCommittable(files=[(path, pending, rows, bytes), ...])``.
3. ``commit`` (driver, once every task voted):

   a. a batch a compact record covers was committed long ago: delete the
      re-run's pending files, stop;
   b. create ``_firesteel/manifests/<sink>/<N>.json`` unless it exists:
      **this PUT is the commit point**; if it exists, an earlier attempt
      committed N: roll its moves forward, delete the new pending files, stop;
      fault point ``driver.mid_commit``;
   c. finalize: for each listed file, target present -> skip, else move the
      pending file to its deterministic final key
      ``<bucket cols>/part-<N>-<partition>-<n>-<sink>.<ext>`` (a rename
      locally; copy then delete on an object store);
   d. delete what is left under ``pending/<sink>/<N>/`` (other attempts);
   e. every ``COMPACT_EVERY`` batches fold the manifests into one record.

4. ``recover`` (in ``prepare``, before a run's first batch) rolls forward
   every batch that has a manifest and pending files, and drops pending
   folders of batches that can no longer commit.

Crash windows (a plain reader = pyarrow's dataset over ``<out>``, or a
boto3 listing outside ``_firesteel/``):

* during 1-2 or before 3b's PUT: only pending objects (or an unfinished
  multipart upload, invisible and billed until the bucket's
  AbortIncompleteMultipartUpload rule or the next run's cleanup of the
  folder removes the parts) exist; nothing is visible; Spark re-runs N
  and its commit discards them (3d), or ``recover`` does once N+1 committed.
* after 3b, during 3c: N is committed but partly visible. No row is visible
  twice (final keys are deterministic, a copy never runs over an existing
  target), and the restart's ``recover`` or Spark's re-run of N's commit
  finishes the moves from the manifest; until then a plain reader sees part
  of N, as with Spark's own file sink without its metadata log.
* inside one move on an object store (copy done, delete not): both objects
  exist, the target is final and complete; the pending copy is hidden and
  removed by 3d or ``recover``.
* after 3c, before Spark's ``commits/N``: Spark runs N's commit again
  (or re-runs the batch): 3b finds the manifest, keeps its files, and
  discards the re-run's.
* during 3e: the compact record is created before anything is deleted,
  and readers of the manifests ignore what it covers.

The manifest is created with "create unless it exists" (an exclusive hard
link locally; on S3 a conditional PUT, ``If-None-Match: *``, so of two
writers racing for it exactly one wins; on other object stores, and on S3
without boto3, a HEAD then a PUT: see :func:`firesteel.core.durable.create_record`).
Two drivers never commit one sink id at once: the id is
owned by one Spark query (:meth:`FilesSink._claim`), and Spark runs a query
once. Spark's own checkpoint may stay local (the wheel carries no S3A jar);
the output and firesteel's records follow ``path``.

Final names are deterministic from (sink id, batch, partition, n), and a batch
is published from exactly one manifest, so a re-run can never add a second copy.

The default sink id follows the output path, and the first query to write
owns it (:meth:`FilesSink._claim`): the same job restarted on a new
checkpoint, whose batch ids start again at 0, is refused instead of writing
every batch twice, unless option ``sink.new.stream`` says it is a new stream.
"""

from __future__ import annotations

import logging
import uuid

import pyarrow as pa

from firesteel.core.spi import ConfigError, TwoPhaseCommitSink
from firesteel.core.toolkit import Ownership, check_location
from firesteel.files.sink.committer import FilesCommitter
from firesteel.files.sink.manifest import FileCommittable
from firesteel.files.sink.paths import OUTPUT_RECORDS_DIR, manifest_dir, valid_sink_id
from firesteel.files.sink.writer import FilesWriter, TaskWriter, WriterConfig

logger = logging.getLogger(__name__)


class FilesSink(FilesWriter, FilesCommitter, TwoPhaseCommitSink[TaskWriter, FileCommittable]):
    """Exactly-once Parquet / JSON-lines output with per-batch manifests (see module docs):
    the writer half on the executors, the committer half on the driver."""

    name = "firesteel.files"
    committable_type = FileCommittable

    def __init__(self, config: WriterConfig, schema: pa.Schema | None = None) -> None:
        if not valid_sink_id(config.sink_id):
            msg = (
                f"option 'sink.id': {config.sink_id!r} may only contain letters, digits, "
                "'.', '_' and '-' (it names files)"
            )
            raise ConfigError(msg)
        FilesWriter.__init__(self, config, schema)
        FilesCommitter.__init__(self, config)

    # -- driver: before the first batch -------------------------------------------

    def prepare(self) -> None:
        """Check that ``path`` is reachable and writable, then recover what a crashed run left."""
        check_location(self.out.location, self.out.config)
        probe = f"{OUTPUT_RECORDS_DIR}/.probe-{uuid.uuid4().hex}"
        try:
            with self.out.open_output(probe):
                pass
            self.out.delete(probe)
        except OSError as exc:
            if self.out.object_store:
                raise self.out.error(exc, "write") from None
            msg = (
                f"option 'path': the output folder {self.out.uri} is not writable ({exc}); "
                "create it with write permission or choose another path"
            )
            raise ConfigError(msg) from exc
        self._claim()
        super().prepare()

    def _claim(self) -> None:
        """Refuse a sink id whose committed batches another query (checkpoint) wrote.

        The id's owner record is ``_firesteel/owners/<id>.json``
        (:meth:`~firesteel.core.toolkit.Ownership.claim`); the owner has committed
        once it has a manifest. The default id follows the output path (see
        :func:`firesteel.core.spi.default_sink_id`), so this also catches the
        same job restarted on a new checkpoint.
        """
        manifests = manifest_dir(self.sink_id)
        Ownership(
            subject=f"firesteel.files: sink {self.sink_id!r} in {self.out.uri}",
            query_id=self.config.query_id,
            remedy="Restart from the owner's checkpoint; or, if this is a new stream into "
            f"{self.out.uri} on purpose, set option 'sink.new.stream' to true (with an "
            "explicit 'sink.id': give it a new one)",
        ).claim(
            self.out.uri_of(f"{OUTPUT_RECORDS_DIR}/owners/{self.sink_id}.json"),
            owner_committed=lambda: bool(self.out.names(manifests)),
            config=self.out.config,
        )
