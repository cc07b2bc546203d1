"""The transactional file sink: pending objects, a manifest as the commit, idempotent moves.

Tasks write pending files (:class:`~firesteel.files.sink.writer.FilesWriter`);
the driver's commit creates the batch's manifest, the commit point, then moves
the files to deterministic final names
(:class:`~firesteel.files.sink.committer.FilesCommitter`). The same on a local
folder and on an object store. Why this design, the commit's numbered steps and
what a crash in each window leaves: the connector's README, "How the commit works".
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
