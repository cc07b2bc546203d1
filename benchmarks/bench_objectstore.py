"""The file sink writing to an object store, beside pyarrow writing the same data there (issue 32).

Goal: at least 0.5x pyarrow's throughput (issue 32: both pay the transfer to
the store).

- firesteel: one Structured Streaming query, Spark's own parquet source over
  local input files (resettable, so the sink runs ``guarantee=exactly-once``)
  -> ``writeStream.format("firesteel.files")`` with ``path`` an ``s3a://``
  prefix and the store's ``fs.s3a.*`` settings as options, ``Trigger.AvailableNow``,
  timed from ``start()`` to the end of ``awaitTermination()``: Spark's transfer
  of the rows to the Python writer, the pending uploads, the manifest PUT and
  the server-side copies that publish the files.
- pyarrow: the same rows, already in memory as Arrow tables (one per input
  file), written with ``pyarrow.parquet.write_table`` through
  ``pyarrow.fs.S3FileSystem(endpoint_override=..., scheme="http")`` to another
  prefix of the same bucket on the same server, in the same run.

The store is an S3 API server process on 127.0.0.1 (moto's server mode,
:class:`firesteel.testing.s3.S3Server`), started by the group's setup and
stopped by PID after its last workload. Every run's output is counted
afterwards with pyarrow's dataset reader over S3 (not firesteel's), outside the
timing, and deleted, so the server holds one run's output at a time. MB/s is
the input's Parquet bytes divided by wall time; CPU seconds are the whole
process tree's, the S3 server included (a child of the benchmark process), and
split by process: the JVM, Spark's Python workers, the driver and the server.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyarrow import fs
from pyspark.sql.streaming import DataStreamWriter

from benchmarks import cpu, spark
from benchmarks.bench_files import write_input
from benchmarks.framework import Figure, Workload
from firesteel.testing.s3 import S3Server

FULL_ROWS = 4_000_000
FULL_FILES = 8
QUICK_ROWS = 20_000
QUICK_FILES = 2
BUCKET = "objectstore-bench"


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
    written = ds.dataset(prefix, format="parquet", filesystem=store).count_rows()
    store.delete_dir(prefix)
    if written != _STORE.rows:
        msg = f"bench_objectstore: {side} wrote {written} rows of {_STORE.rows} to s3://{prefix}"
        raise RuntimeError(msg)
    extra = {"MB/s": _STORE.input_bytes / 2**20 / elapsed}
    # Where the CPU goes: Spark's JVM (reading Parquet, turning rows into Arrow for the
    # writer), the Python workers (the sink's encoding), the driver (pyarrow's encoding)
    # and the S3 server, which both sides share.
    for kind in (cpu.TOTAL, cpu.JVM, cpu.PYTHON_WORKERS, cpu.DRIVER, cpu.S3_SERVER):
        extra[kind] = usage.get(kind, 0.0)
    return Figure(_STORE.rows / elapsed, extra)


def firesteel_sink() -> Figure:
    """Spark's parquet source -> the firesteel file sink on ``s3a://``, exactly-once."""
    server, source = _STORE.ready()
    session = spark.session()
    prefix = _STORE.prefix("firesteel")
    schema = session.read.parquet(str(source)).schema
    with tempfile.TemporaryDirectory(prefix="firesteel-bench-objectstore-chk-") as work:

        def build() -> DataStreamWriter:
            writer = (
                session.readStream.schema(schema)
                .parquet(str(source))
                .writeStream.format("firesteel.files")
                .option("path", f"s3a://{prefix}")
                .option("format", "parquet")
                .option("guarantee", "exactly-once")
            )
            for key, value in server.settings().items():
                writer = writer.option(key, value)
            return writer

        with cpu.measure() as usage:
            _, elapsed = spark.available_now(build, Path(work) / "checkpoint")
    return _checked(prefix, "the firesteel sink", elapsed, usage)


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
    """One workload: 4M rows (20k with ``quick``) through the file sink to S3 beside pyarrow."""
    rows = QUICK_ROWS if quick else FULL_ROWS
    label = f"{rows / 1e6:g}M" if rows >= 1_000_000 else f"{rows // 1000}k"
    repetitions, warmup = (1, 0) if quick else (3, 1)
    return [
        Workload(
            group="objectstore",
            name=f"Spark parquet source -> files sink on s3a:// (moto), {label} rows",
            unit="rows/s",
            baseline_name="pyarrow write_table to the same S3 server",
            goal=0.5,
            issue="issue 32",
            firesteel=firesteel_sink,
            baseline=pyarrow_write,
            repetitions=repetitions,
            warmup=warmup,
        )
    ]
