"""Parquet files through Spark: the copy, then the sink alone and the source alone.

Goals: the copy at least 0.8x the throughput of pyarrow reading and writing the
same files directly (issue 2); the sink and the source alone at least 0.95x a
bare Python data source and the sink 1.3x Spark's own (issue 12).

- firesteel: one Structured Streaming query,
  ``readStream.format("firesteel.files")`` -> ``writeStream.format("firesteel.files")``
  with ``Trigger.AvailableNow``, on the shared ``local[2]`` session; timed from
  ``start()`` to the end of ``awaitTermination()``, so query planning, the
  guarantee check and the two-phase commit of every batch are included.
- raw pyarrow: ``pyarrow.dataset`` reads each input file and
  ``pyarrow.parquet.write_table`` writes it out, one output file per input
  file, with pyarrow's default threads and compression.
- The sink alone (goal, issue 12: 1.3x): Spark's own parquet source feeding
  the firesteel file sink with ``guarantee=exactly-once`` (Spark's file source
  is recognised as resettable), beside Spark's own source and sink.
- The sink alone against the API's ceiling (goal, issue 12: 0.95x): the same
  query into ``bench.bare`` (:mod:`benchmarks.bare`), a Python Arrow sink with
  no protocol that writes each task's batches into one Parquet file; and, for
  context, against pyarrow writing the same Arrow data, already in memory, to
  Parquet files in one process (the floor of the write itself).
- The source alone (goal, issue 12: 0.95x): ``firesteel.files`` -> Spark's
  ``noop`` sink beside ``bench.bare``'s reader -> ``noop`` (the same files, one
  partition per file, 64k-row batches, no file log); and, for context, beside
  Spark's own parquet source -> ``noop``, which never leaves the JVM.
- For context, reported without a goal: the same query through Spark's
  built-in (JVM) parquet file source and file sink, which moves no data
  through Python at all; it shows how much of the gap to pyarrow is Spark's
  own and how much is the Python data source path.

Both sides copy the same input directory into a fresh output directory, and
every run's output is counted afterwards (outside the timing): a run that lost
or duplicated rows fails the benchmark rather than reporting a fast figure.
MB/s is input bytes on disk divided by wall time. Each side also reports the
CPU seconds its run cost the whole process tree (driver, JVM, Python workers),
which a busy shared machine disturbs far less than wall time.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter

from benchmarks import bare, cpu, spark
from benchmarks.framework import Figure, Measure, Workload, measured_once

FULL_ROWS = 10_000_000
FULL_FILES = 20
QUICK_ROWS = 50_000
QUICK_FILES = 2
KEYS = 10_000


@dataclass
class _Data:
    """The input directory of the group's runs; set by :func:`setup`."""

    root: Path | None = None
    rows: int = 0
    input_bytes: int = 0
    runs: Iterator[int] = field(default_factory=count)

    @property
    def input(self) -> Path:
        if self.root is None:
            msg = "bench_files: the group's setup() has not run"
            raise RuntimeError(msg)
        return self.root / "input"

    def fresh(self, side: str) -> Path:
        """An empty directory for one run's output (the previous run's is deleted)."""
        root = self.input.parent
        for old in root.glob(f"{side}-*"):
            shutil.rmtree(old)
        path = root / f"{side}-{next(self.runs)}"
        path.mkdir()
        return path


_DATA = _Data()


def event_table(start: int, rows: int) -> pa.Table:
    """Sequence-numbered rows with a string key, a float and a timestamp, like event data."""
    seq = np.arange(start, start + rows, dtype=np.int64)
    rng = np.random.default_rng(start)
    keys = pa.array(np.char.add("key-", (seq % KEYS).astype(str)))
    return pa.table(
        {
            "seq": seq,
            "key": keys,
            "value": rng.random(rows),
            "ts": pa.array(1_700_000_000_000_000 + seq * 1000, pa.timestamp("us", tz="UTC")),
        }
    )


def write_input(directory: Path, rows: int, files: int) -> int:
    directory.mkdir(parents=True)
    per_file = -(-rows // files)
    for index, start in enumerate(range(0, rows, per_file)):
        part = event_table(start, min(per_file, rows - start))
        pq.write_table(part, directory / f"part-{index:05d}.parquet")
    return sum(path.stat().st_size for path in directory.glob("*.parquet"))


@contextmanager
def setup(quick: bool) -> Iterator[None]:
    """Write the input files once for every run of the group; delete everything after.

    Also starts the shared Spark session, so no timed run pays for the JVM start, and
    registers ``bench.bare`` in it.
    """
    rows, files = (QUICK_ROWS, QUICK_FILES) if quick else (FULL_ROWS, FULL_FILES)
    bare.register(spark.session())
    root = Path(tempfile.mkdtemp(prefix="firesteel-bench-files-"))
    try:
        _DATA.root = root
        _DATA.rows = rows
        _DATA.input_bytes = write_input(root / "input", rows, files)
        yield
    finally:
        _DATA.root = None
        shutil.rmtree(root, ignore_errors=True)


def _check_output(directory: Path, side: str) -> None:
    # A plain pyarrow read of the sink's output must see exactly the committed rows.
    written = ds.dataset(directory, format="parquet").count_rows()
    if written != _DATA.rows:
        msg = f"bench_files: {side} wrote {written} rows of {_DATA.rows} into {directory}"
        raise RuntimeError(msg)


def _figure(elapsed: float, usage: cpu.Usage) -> Figure:
    extra = {"MB/s": _DATA.input_bytes / 2**20 / elapsed}
    for kind in (cpu.TOTAL, cpu.JVM, cpu.PYTHON_WORKERS, cpu.DRIVER):
        extra[kind] = usage.get(kind, 0.0)
    return Figure(_DATA.rows / elapsed, extra)


def firesteel_copy() -> Figure:
    """One AvailableNow query copying the input through the firesteel file source and sink."""
    session = spark.session()
    work = _DATA.fresh("firesteel")
    out = work / "out"
    with cpu.measure() as usage:
        _, elapsed = spark.available_now(
            lambda: (
                session.readStream.format("firesteel.files")
                .option("format", "parquet")
                # The discovered-file log would default to a folder inside the input
                # directory, shared by every run; each run gets its own, like a new job.
                .option("log.path", str(work / "source-log"))
                .load(str(_DATA.input))
                .writeStream.format("firesteel.files")
                .option("path", str(out))
                .option("format", "parquet")
            ),
            work / "checkpoint",
        )
    _check_output(out, "firesteel")
    return _figure(elapsed, usage)


def pyarrow_copy() -> Figure:
    """Raw pyarrow: read every input file with pyarrow.dataset and write it with pyarrow.parquet."""
    out = _DATA.fresh("pyarrow")
    with cpu.measure() as usage:
        started = time.perf_counter()
        fragments = ds.dataset(_DATA.input, format="parquet").get_fragments()
        for index, fragment in enumerate(fragments):
            pq.write_table(fragment.to_table(), out / f"part-{index:05d}.parquet")
        elapsed = time.perf_counter() - started
    _check_output(out, "pyarrow")
    return _figure(elapsed, usage)


def _from_spark_source(side: str, sink: str, options: dict[str, str]) -> Figure:
    """Spark's own parquet file source -> ``sink``, one AvailableNow query."""
    session = spark.session()
    work = _DATA.fresh("spark-source-" + sink.replace(".", "-"))
    out = work / "out"
    schema = session.read.parquet(str(_DATA.input)).schema

    def build() -> DataStreamWriter:
        writer = session.readStream.schema(schema).parquet(str(_DATA.input)).writeStream
        for key, value in {**options, "path": str(out)}.items():
            writer = writer.option(key, value)
        return writer.format(sink)

    with cpu.measure() as usage:
        _, elapsed = spark.available_now(build, work / "checkpoint")
    _check_output(out, side)
    return _figure(elapsed, usage)


def _to_noop(side: str, reader: Callable[[Path], DataFrame]) -> Figure:
    """One AvailableNow query from the frame ``reader`` builds (given the run's folder) into
    ``noop``."""
    work = _DATA.fresh(side)
    with cpu.measure() as usage:
        query, elapsed = spark.available_now(
            lambda: reader(work).writeStream.format("noop"), work / "checkpoint"
        )
    rows = spark.rows_read(query)
    if rows != _DATA.rows:
        msg = f"bench_files: {side} read {rows} rows of {_DATA.rows}"
        raise RuntimeError(msg)
    return _figure(elapsed, usage)


def firesteel_source_alone() -> Figure:
    """``firesteel.files`` -> ``noop``: the source alone."""
    session = spark.session()
    return _to_noop(
        "firesteel-noop",
        lambda work: (
            session.readStream.format("firesteel.files")
            .option("format", "parquet")
            .option("log.path", str(work / "source-log"))
            .load(str(_DATA.input))
        ),
    )


def bare_source_alone() -> Figure:
    """``bench.bare`` -> ``noop``: a Python streaming source with no protocol."""
    session = spark.session()
    return _to_noop(
        "bare-noop",
        lambda work: session.readStream.format(bare.NAME).option("path", str(_DATA.input)).load(),
    )


def spark_source_alone() -> Figure:
    """Spark's own parquet source -> ``noop``."""
    session = spark.session()
    schema = session.read.parquet(str(_DATA.input)).schema
    return _to_noop(
        "spark-noop", lambda work: session.readStream.schema(schema).parquet(str(_DATA.input))
    )


def spark_source_bare_sink() -> Figure:
    """Spark's parquet source -> ``bench.bare``: a Python Arrow sink with no protocol."""
    return _from_spark_source("bare Python sink", bare.NAME, {})


def pyarrow_write() -> Figure:
    """pyarrow writing the input's rows, already in memory as Arrow, to Parquet files."""
    tables = [fragment.to_table() for fragment in ds.dataset(_DATA.input).get_fragments()]
    out = _DATA.fresh("pyarrow-write")
    with cpu.measure() as usage:
        started = time.perf_counter()
        for index, table in enumerate(tables):
            pq.write_table(table, out / f"part-{index:05d}.parquet")
        elapsed = time.perf_counter() - started
    _check_output(out, "pyarrow write")
    return _figure(elapsed, usage)


def spark_builtin_copy() -> Figure:
    """Spark's own parquet file source -> parquet file sink, the same AvailableNow query."""
    return _from_spark_source("Spark's parquet sink", "parquet", {})


def spark_source_firesteel_sink() -> Figure:
    """Spark's parquet source -> firesteel.files sink, certified exactly-once: the sink alone."""
    return _from_spark_source(
        "firesteel sink after Spark's source",
        "firesteel.files",
        {"format": "parquet", "guarantee": "exactly-once"},
    )


def workloads(quick: bool) -> list[Workload]:
    """The files group, 10M rows (50k with ``quick``): the copy, then the sink and the source
    alone, each beside what a user would pick instead."""
    rows = QUICK_ROWS if quick else FULL_ROWS
    label = f"{rows / 1e6:g}M" if rows >= 1_000_000 else f"{rows // 1000}k"
    # Quick runs are smoke tests (a query's fixed cost dominates 50k rows): one round.
    repetitions, warmup = (1, 0) if quick else (3, 1)

    def pair(
        name: str,  # "{label}" becomes the row count
        firesteel: Measure,
        baseline_name: str,
        baseline: Measure,
        goal: float | None = None,
        issue: str | None = None,
    ) -> Workload:
        return Workload(
            group="files",
            name=name.format(label=label),
            unit="rows/s",
            baseline_name=baseline_name,
            goal=goal,
            issue=issue,
            firesteel=firesteel,
            baseline=baseline,
            repetitions=repetitions,
            warmup=warmup,
        )

    copy: Measure = firesteel_copy
    sink: Measure = spark_source_firesteel_sink
    source: Measure = firesteel_source_alone
    builtin_copy: Measure = spark_builtin_copy
    if quick:
        # Each of these sides serves two or three workloads: a quick run runs it once.
        copy, sink, source, builtin_copy = (
            measured_once(side) for side in (copy, sink, source, builtin_copy)
        )
    return [
        pair(
            "parquet files -> files sink, {label} rows",
            copy,
            "raw pyarrow",
            pyarrow_copy,
            0.8,
            "issue 2",
        ),
        pair(
            "parquet files -> files sink, {label} rows (vs Spark's JVM file sink)",
            copy,
            "Spark parquet source/sink",
            builtin_copy,
        ),
        pair(
            "Spark parquet source -> files sink exactly-once, {label} rows (the sink alone)",
            sink,
            "Spark parquet source/sink",
            builtin_copy,
            1.3,
            "issue 12",
        ),
        pair(
            "files sink alone, {label} rows (vs a bare sink)",
            sink,
            "bare Python Arrow sink (no protocol)",
            spark_source_bare_sink,
            0.95,
            "issue 12",
        ),
        pair(
            "files sink alone, {label} rows (vs pyarrow write)",
            sink,
            "pyarrow writing the same Arrow data",
            pyarrow_write,
        ),
        pair(
            "files source alone -> noop, {label} rows",
            source,
            "bare Python source (no protocol) -> noop",
            bare_source_alone,
            0.95,
            "issue 12",
        ),
        pair(
            "files source alone -> noop, {label} rows (vs Spark's source)",
            source,
            "Spark parquet source -> noop",
            spark_source_alone,
        ),
    ]
