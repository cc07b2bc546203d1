"""The file sink writing to an object store, beside pyarrow writing the same data there (issue 32).

Goal: at least 0.5x the throughput of ``spark+pyarrow (foreachBatch)``, the
side a Spark user would write instead of firesteel. Issue 32 sets the goal
"since both share Spark's transfer cost": the same Spark query over the same
input, its rows reaching Python as Arrow and written to the same server with
pyarrow, so the ratio measures what the sink adds, not what Spark costs.
Three sides, in the same run, on the same input, each workload alternating its
two sides with the same repetitions:

- firesteel: one Structured Streaming query, Spark's own parquet source over
  local input files (resettable, so the sink runs ``guarantee=exactly-once``)
  -> ``writeStream.format("firesteel.files")`` with ``path`` an ``s3a://``
  prefix and the store's ``fs.s3a.*`` settings as options, ``Trigger.AvailableNow``,
  timed from ``start()`` to the end of ``awaitTermination()``: Spark's transfer
  of the rows to the Python writer, the pending uploads, the manifest PUT and
  the server-side copies that publish the files.
- spark+pyarrow (foreachBatch), the goal's baseline: the same query and
  trigger, ``foreachBatch`` running ``mapInArrow`` over each micro-batch, so
  each Spark task writes the Arrow batches it is handed into one Parquet file
  with ``pyarrow.parquet.ParquetWriter`` through ``pyarrow.fs.S3FileSystem``:
  the same tasks, so the same file count as the sink, and the same Parquet
  settings (Snappy, a row group per 32 MiB of buffered Arrow data, at most
  1 Mi rows, as the sink writes them). No exactly-once: a retried task or
  batch writes its file again.
- pyarrow alone, the upper bound (no goal): the same rows, already in memory
  as Arrow tables (one per input file), written with
  ``pyarrow.parquet.write_table`` through the same client. It pays none of
  Spark's transfer, which the other two share.

The store is an S3 API server process on 127.0.0.1 (moto's server mode,
:class:`firesteel.testing.s3.S3Server`), started by the group's setup and
stopped by PID after its last workload. Every run's output is counted
afterwards with pyarrow's dataset reader over S3 (not firesteel's), outside the
timing, with its files and row groups, and deleted, so the server holds one
run's output at a time. MB/s is the input's Parquet bytes divided by wall time;
CPU seconds are the whole process tree's, the S3 server included (a child of
the benchmark process), and split by process: the JVM, Spark's Python workers,
the driver and the server.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyarrow import fs
from pyspark import TaskContext, cloudpickle
from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter

from benchmarks import cpu, spark
from benchmarks.bench_files import write_input
from benchmarks.framework import Figure, Measure, Workload, measured_once
from firesteel.files.sink.writer import FLUSH_BYTES
from firesteel.testing.s3 import S3Server

# Spark's Python workers cannot import this module by name (benchmarks/ is not installed).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

FULL_ROWS = 4_000_000
FULL_FILES = 8
QUICK_ROWS = 20_000
QUICK_FILES = 2
BUCKET = "objectstore-bench"
ROW_GROUP_ROWS = 1024 * 1024
"""The file sink's ``row_group_size``; it writes one row group per ``FLUSH_BYTES`` buffered."""


@dataclass
class _Store:
    """The server, the input and its rows in memory; set by :func:`setup`."""

    server: S3Server | None = None
    input: Path | None = None
    tables: list[pa.Table] = field(default_factory=list)
    rows: int = 0
    input_bytes: int = 0
    runs: Iterator[int] = field(default_factory=count)

    def ready(self) -> tuple[S3Server, Path]:
        if self.server is None or self.input is None:
            msg = "bench_objectstore: the group's setup() has not run"
            raise RuntimeError(msg)
        return self.server, self.input

    def filesystem(self) -> fs.S3FileSystem:
        """pyarrow's own S3 client of the server: the baseline's writer and the checker."""
        server, _ = self.ready()
        return server.filesystem()

    def prefix(self, side: str) -> str:
        """A new prefix of the bucket for one run's output."""
        return f"{BUCKET}/{side}-{next(self.runs)}"


_STORE = _Store()


@contextmanager
def setup(quick: bool) -> Iterator[None]:
    """Start the S3 server and the shared Spark session, write the input once; stop the
    server by PID and delete everything after the group."""
    rows, files = (QUICK_ROWS, QUICK_FILES) if quick else (FULL_ROWS, FULL_FILES)
    spark.session()
    root = Path(tempfile.mkdtemp(prefix="firesteel-bench-objectstore-"))
    server = S3Server(root / "s3")
    try:
        server.start()
        server.create_bucket(BUCKET)
        _STORE.server, _STORE.input = server, root / "input"
        _STORE.input_bytes = write_input(_STORE.input, rows, files)
        fragments = ds.dataset(_STORE.input).get_fragments()
        _STORE.tables = [fragment.to_table() for fragment in fragments]
        _STORE.rows = rows
        yield
    finally:
        server.stop()
        _STORE.server = _STORE.input = None
        _STORE.tables = []
        shutil.rmtree(root, ignore_errors=True)


def _checked(prefix: str, side: str, elapsed: float, usage: cpu.Usage) -> Figure:
    """Count the run's output with pyarrow's dataset reader over S3, delete it, and give
    its figure."""
    store = _STORE.filesystem()
    fragments = list(ds.dataset(prefix, format="parquet", filesystem=store).get_fragments())
    written = sum(fragment.count_rows() for fragment in fragments)
    row_groups = sum(fragment.metadata.num_row_groups for fragment in fragments)
    store.delete_dir(prefix)
    if written != _STORE.rows:
        msg = f"bench_objectstore: {side} wrote {written} rows of {_STORE.rows} to s3://{prefix}"
        raise RuntimeError(msg)
    # Files and row groups show that the sides write the same layout (the upper bound
    # writes one file per input file).
    extra = {
        "MB/s": _STORE.input_bytes / 2**20 / elapsed,
        "files": float(len(fragments)),
        "row groups": float(row_groups),
    }
    # Where the CPU goes: Spark's JVM (reading Parquet, turning rows into Arrow for the
    # writer), the Python workers (the sink's encoding), the driver (pyarrow's encoding)
    # and the S3 server, which both sides share.
    for kind in (cpu.TOTAL, cpu.JVM, cpu.PYTHON_WORKERS, cpu.DRIVER, cpu.S3_SERVER):
        extra[kind] = usage.get(kind, 0.0)
    return Figure(_STORE.rows / elapsed, extra)


def _query(side: str, sink: Callable[[DataStreamWriter, str], DataStreamWriter]) -> Figure:
    """Spark's parquet source over the input, ``sink`` applied to its writer for a new
    prefix, run with ``Trigger.AvailableNow``; the checked figure of ``side``."""
    _, source = _STORE.ready()
    session = spark.session()
    prefix = _STORE.prefix(side)
    schema = session.read.parquet(str(source)).schema
    with tempfile.TemporaryDirectory(prefix="firesteel-bench-objectstore-chk-") as work:

        def build() -> DataStreamWriter:
            return sink(session.readStream.schema(schema).parquet(str(source)).writeStream, prefix)

        with cpu.measure() as usage:
            _, elapsed = spark.available_now(build, Path(work) / "checkpoint")
    return _checked(prefix, side, elapsed, usage)


def firesteel_sink() -> Figure:
    """Spark's parquet source -> the firesteel file sink on ``s3a://``, exactly-once."""
    server, _ = _STORE.ready()

    def sink(writer: DataStreamWriter, prefix: str) -> DataStreamWriter:
        writer = (
            writer.format("firesteel.files")
            .option("path", f"s3a://{prefix}")
            .option("format", "parquet")
            .option("guarantee", "exactly-once")
        )
        for key, value in server.settings().items():
            writer = writer.option(key, value)
        return writer

    return _query("firesteel", sink)


def _task_writer(
    store: fs.S3FileSystem, prefix: str
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``mapInArrow``'s function: the task's batches into one Parquet file under ``prefix``,
    buffered into row groups as the file sink buffers them; yields the rows written."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        context = TaskContext.get()
        partition = context.partitionId() if context else 0
        path = f"{prefix}-{partition:05d}.parquet"
        writer: pq.ParquetWriter | None = None
        buffered: list[pa.RecordBatch] = []
        buffered_bytes = rows = 0
        for batch in batches:
            buffered.append(batch)
            buffered_bytes += batch.nbytes
            rows += batch.num_rows
            if buffered_bytes >= FLUSH_BYTES:
                writer = _write_group(writer, store, path, buffered)
                buffered, buffered_bytes = [], 0
        if buffered:
            writer = _write_group(writer, store, path, buffered)
        if writer is not None:
            writer.close()
        yield pa.record_batch({"rows": [rows]})

    return write


def _write_group(
    writer: pq.ParquetWriter | None,
    store: fs.S3FileSystem,
    path: str,
    batches: list[pa.RecordBatch],
) -> pq.ParquetWriter:
    table = pa.Table.from_batches(batches)
    if writer is None:
        writer = pq.ParquetWriter(path, table.schema, filesystem=store, compression="snappy")
    writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
    return writer


def spark_pyarrow() -> Figure:
    """The same query, ``foreachBatch`` writing each task's Arrow batches with pyarrow."""
    store = _STORE.filesystem()

    def sink(writer: DataStreamWriter, prefix: str) -> DataStreamWriter:
        def write_batch(frame: DataFrame, batch_id: int) -> None:
            task = _task_writer(store, f"{prefix}/part-{batch_id:05d}")
            frame.mapInArrow(task, "rows long").collect()

        return writer.foreachBatch(write_batch)

    return _query("spark-pyarrow", sink)


def pyarrow_write() -> Figure:
    """pyarrow writing the same Arrow tables to the same server, one object per table."""
    store = _STORE.filesystem()
    prefix = _STORE.prefix("pyarrow")
    with cpu.measure() as usage:
        started = time.perf_counter()
        for index, table in enumerate(_STORE.tables):
            pq.write_table(table, f"{prefix}/part-{index:05d}.parquet", filesystem=store)
        elapsed = time.perf_counter() - started
    return _checked(prefix, "pyarrow", elapsed, usage)


def workloads(quick: bool) -> list[Workload]:
    """4M rows (20k with ``quick``) through the file sink to S3, beside Spark + pyarrow (the
    goal's baseline) and beside pyarrow alone (the upper bound)."""
    rows = QUICK_ROWS if quick else FULL_ROWS
    label = f"{rows / 1e6:g}M" if rows >= 1_000_000 else f"{rows // 1000}k"
    repetitions, warmup = (1, 0) if quick else (3, 1)
    # The sink's side serves both workloads: a quick run runs it once.
    ours: Measure = measured_once(firesteel_sink) if quick else firesteel_sink
    name = f"Spark parquet source -> files sink on s3a:// (moto), {label} rows"
    return [
        Workload(
            group="objectstore",
            name=name,
            unit="rows/s",
            baseline_name=(
                "spark+pyarrow (foreachBatch), pyarrow writing per task "
                "(the goal's baseline: same Spark transfer)"
            ),
            goal=0.5,
            issue="issue 32",
            firesteel=ours,
            baseline=spark_pyarrow,
            repetitions=repetitions,
            warmup=warmup,
        ),
        Workload(
            group="objectstore",
            name=f"{name}, against the upper bound",
            unit="rows/s",
            baseline_name=("pyarrow alone, tables in memory (upper bound: no Spark transfer)"),
            goal=None,
            firesteel=ours,
            baseline=pyarrow_write,
            repetitions=repetitions,
            warmup=warmup,
        ),
    ]
