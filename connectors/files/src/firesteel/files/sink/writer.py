"""The executor half of the file sink (Sink V2's writer): bucketed, rolling pending files.

Incoming Arrow batches are split by bucket (``bucket.by`` values), buffered
per bucket so Parquet row groups are large even when Spark hands over small
batches, and written to ``<out>/_firesteel/pending/<sink>/<batch>/...``. A file
rolls once it exceeds ``roll.size.bytes``; :meth:`TaskWriter.close` flushes and
closes everything (locally also fsyncs; on an object store the close is the
upload's completing request, after which the object exists whole), which is
the task's pre-commit: :class:`FilesWriter` returns the typed
:class:`~firesteel.files.sink.manifest.FileCommittable` the committer publishes.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from firesteel.core.spi import SinkError, SinkWriter, TaskScope
from firesteel.core.toolkit import Folder, StorageConfig
from firesteel.files.sink.manifest import CommittedFile, FileCommittable
from firesteel.files.sink.paths import bucket_dir, final_name, pending_dir

FLUSH_BYTES = 32 * 1024 * 1024
"""Buffer this much per open file before writing a Parquet row group / JSON chunk."""


@dataclass(frozen=True)
class WriterConfig:
    """What a task needs to write (picklable: it travels inside the sink)."""

    out: str
    sink_id: str
    format: str
    bucket_columns: tuple[str, ...]
    roll_size_bytes: int
    compression: str | None
    query_id: str | None = None
    """Spark's query id (``<checkpoint>/metadata``): the sink id's owner in ``out``."""
    storage: StorageConfig = field(default_factory=StorageConfig)
    """The store's ``fs.*`` settings (sink options over the session's ``spark.hadoop.fs.*``)."""

    @property
    def output(self) -> Folder:
        """The output location, resolved with :attr:`storage`."""
        return Folder(self.out, self.storage)

    @property
    def extension(self) -> str:
        """File name extension, e.g. ``.parquet`` or ``.json.gz``."""
        if self.format == "parquet":
            return ".parquet"
        suffix = {"gzip": ".gz", "bz2": ".bz2", "zstd": ".zst", "lz4": ".lz4"}
        return ".json" + (suffix.get(self.compression or "", ""))


@dataclass
class _OpenFile:
    bucket: str
    n: int
    pending: str
    final: str
    stream: Any
    writer: Any = None
    buffered: list[pa.RecordBatch] = field(default_factory=list)
    buffered_bytes: int = 0
    rows: int = 0


class TaskWriter:
    """The open transaction of one write task: pending files per bucket."""

    def __init__(self, config: WriterConfig, scope: TaskScope, schema: pa.Schema | None) -> None:
        self.config = config
        self.scope = scope
        self.schema = schema
        self.out = config.output
        self.folder = pending_dir(config.sink_id, scope.batch_id)
        self.open: dict[str, _OpenFile] = {}
        self.done: list[CommittedFile] = []
        self.created: list[str] = []
        self._next_n = 0
        self.token = uuid.uuid4().hex[:8]

    # -- writing ----------------------------------------------------------------

    def write(self, batch: pa.RecordBatch) -> None:
        """Route ``batch``'s rows to their buckets' files."""
        if batch.num_rows == 0:
            return
        if self.schema is None:
            self.schema = batch.schema
        columns = self.config.bucket_columns
        if not columns:
            self._add("", batch)
            return
        missing = [c for c in columns if c not in batch.schema.names]
        if missing:
            msg = (
                f"firesteel.files sink {self.config.sink_id}: option 'bucket.by' names "
                f"{missing}, which the data does not have (columns: {batch.schema.names})"
            )
            raise SinkError(msg)
        # Here, not at the top: only bucketing needs the compute kernels, and importing
        # them (~300 generated wrappers) cost every Python process that loads the sink.
        import pyarrow.compute as pc

        table = pa.Table.from_batches([batch])
        keyed = table.select(list(columns)).append_column(
            "__firesteel_row", pa.array(range(batch.num_rows), pa.int64())
        )
        groups = keyed.group_by(list(columns), use_threads=False).aggregate(
            [("__firesteel_row", "list")]
        )
        values = [groups.column(c).to_pylist() for c in columns]
        rows = groups.column("__firesteel_row_list")
        for g in range(groups.num_rows):
            bucket = bucket_dir(columns, tuple(v[g] for v in values))
            taken = pc.take(table, rows[g].values)
            for part in taken.combine_chunks().to_batches():
                self._add(bucket, part)

    def _add(self, bucket: str, batch: pa.RecordBatch) -> None:
        current = self.open.get(bucket)
        if current is None:
            current = self._start(bucket)
        current.buffered.append(batch)
        current.buffered_bytes += batch.nbytes
        current.rows += batch.num_rows
        if current.buffered_bytes >= min(FLUSH_BYTES, self.config.roll_size_bytes):
            self._flush(current)
            if current.stream.tell() >= self.config.roll_size_bytes:
                self._finish(current)

    def _start(self, bucket: str) -> _OpenFile:
        n = self._next_n
        self._next_n += 1
        scope = self.scope
        # The run token keeps a re-run's pending files (attempt numbers restart
        # with the application) from ever sharing a name with an earlier run's.
        pending = (
            f"{self.folder}/"
            f"{scope.partition_id}-{scope.attempt}-{n}-{self.token}{self.config.extension}"
        )
        name = final_name(
            self.config.sink_id, scope.batch_id, scope.partition_id, n, self.config.extension
        )
        final = f"{bucket}/{name}" if bucket else name
        self.created.append(pending)
        try:
            stream = self.out.open_output(pending)
        except OSError as exc:
            raise self.out.error(exc, f"write {self.out.uri_of(pending)}") from None
        handle = _OpenFile(bucket, n, pending, final, stream)
        self.open[bucket] = handle
        return handle

    def _flush(self, current: _OpenFile) -> None:
        if not current.buffered:
            return
        table = pa.Table.from_batches(current.buffered)
        current.buffered = []
        current.buffered_bytes = 0
        if self.config.format == "parquet":
            import pyarrow.parquet as pq

            if current.writer is None:
                current.writer = pq.ParquetWriter(
                    current.stream, table.schema, compression=self.config.compression or "snappy"
                )
            current.writer.write_table(table, row_group_size=1024 * 1024)
            return
        if current.writer is None:
            current.writer = (
                pa.CompressedOutputStream(current.stream, self.config.compression)
                if self.config.compression and self.config.compression != "none"
                else current.stream
            )
        text = table.to_pandas().to_json(
            orient="records", lines=True, date_format="iso", force_ascii=False
        )
        if text and not text.endswith("\n"):
            text += "\n"
        current.writer.write(text.encode("utf-8"))

    def _finish(self, current: _OpenFile) -> None:
        self._flush(current)
        if current.writer is not None and current.writer is not current.stream:
            current.writer.close()
        if current.stream.closed:
            # A compressed JSON stream closes the file under it: ask the store.
            size = self.out.size(current.pending)
        else:
            size = current.stream.tell()
            current.stream.close()
        self.out.sync(current.pending)
        self.done.append(
            CommittedFile(
                path=current.final, pending=current.pending, rows=current.rows, bytes=size
            )
        )
        del self.open[current.bucket]

    # -- ending -----------------------------------------------------------------

    def close(self) -> list[CommittedFile]:
        """Pre-commit: flush, close and fsync every file; the list the driver will publish."""
        for current in list(self.open.values()):
            self._finish(current)
        if self.done:
            self.out.sync(self.folder)
        return sorted(self.done, key=lambda f: f.path)

    def discard(self) -> None:
        """The task failed: close and delete everything it wrote."""
        for current in list(self.open.values()):
            if not current.stream.closed:
                current.stream.close()
        self.open.clear()
        for key in self.created:
            self.out.delete(key)


class FilesWriter(SinkWriter[TaskWriter, FileCommittable]):
    """Sink V2's writer of the file sink: one :class:`TaskWriter` per task, voting with
    the pending files it closed."""

    def __init__(self, config: WriterConfig, schema: pa.Schema | None = None) -> None:
        self.config = config
        self.schema = schema

    def begin_transaction(self, scope: TaskScope) -> TaskWriter:
        return TaskWriter(self.config, scope, self.schema)

    def write(self, txn: TaskWriter, batch: pa.RecordBatch) -> None:
        txn.write(batch)

    def pre_commit(self, txn: TaskWriter) -> FileCommittable:
        return FileCommittable(tuple(txn.close()))

    def abort_transaction(self, txn: TaskWriter) -> None:
        txn.discard()
