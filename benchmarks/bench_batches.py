"""Per-batch cost over a long query: does a batch get slower as the query runs?

Goal (issue 12): the last 100 of 2,000 tiny batches cost at most 1.1x the first
100 (firesteel's own growth, reported as ``growth``). Work that grows with the
batch count (listing every manifest, rereading every record) shows here long
before it shows in a throughput benchmark.

- firesteel: ``firesteel.files`` source (one tiny Parquet file per batch) ->
  ``firesteel.files`` sink with ``guarantee=exactly-once``;
- baseline: Spark's own Parquet source (``maxFilesPerTrigger=1``) -> Spark's
  own Parquet file sink, the same files.

Both figures are the mean ``triggerExecution`` time of the last window of
batches in milliseconds (lower is better), from Spark's own query progress;
``first ms`` and ``growth`` (last / first) are reported beside them.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks import spark
from benchmarks.framework import Figure, Workload

FULL = (2_000, 100)
QUICK = (4, 2)
"""(batches, window): how many batches run, and how many at each end are averaged."""


class _Input:
    root: Path | None = None
    batches: int = 0
    window: int = 0


_DATA = _Input()


@contextmanager
def setup(quick: bool) -> Iterator[None]:
    """One tiny Parquet file per batch, written once for the group."""
    batches, window = QUICK if quick else FULL
    root = Path(tempfile.mkdtemp(prefix="firesteel-bench-batches-"))
    session = spark.session()
    previous = session.conf.get("spark.sql.streaming.numRecentProgressUpdates")
    session.conf.set("spark.sql.streaming.numRecentProgressUpdates", str(batches + 10))
    try:
        source = root / "input"
        source.mkdir()
        for index in range(batches):
            table = pa.table({"seq": pa.array(range(index * 10, index * 10 + 10), pa.int64())})
            pq.write_table(table, source / f"part-{index:06d}.parquet")
        _DATA.root, _DATA.batches, _DATA.window = root, batches, window
        yield
    finally:
        session.conf.set("spark.sql.streaming.numRecentProgressUpdates", previous or "100")
        _DATA.root = None
        shutil.rmtree(root, ignore_errors=True)


def _run(name: str, build: Callable[[Any, Path], Any]) -> Figure:
    """Run one AvailableNow query over every file and summarise its batch durations."""
    assert _DATA.root is not None
    work = _DATA.root / name
    shutil.rmtree(work, ignore_errors=True)
    query = build(spark.session(), work).trigger(availableNow=True).start()
    query.awaitTermination()
    durations = [
        p["durationMs"]["triggerExecution"] for p in query.recentProgress if p["numInputRows"]
    ]
    if len(durations) < _DATA.batches:
        msg = f"bench_batches: {name} ran {len(durations)} batches, expected {_DATA.batches}"
        raise RuntimeError(msg)
    first = statistics.mean(durations[: _DATA.window])
    last = statistics.mean(durations[-_DATA.window :])
    return Figure(last, {"first ms": first, "growth": last / first})


def _firesteel(session: Any, work: Path) -> Any:
    return (
        session.readStream.format("firesteel.files")
        .option("format", "parquet")
        .option("max.files.per.batch", "1")
        .option("log.path", str(work / "source-log"))
        .load(str(_DATA.root and _DATA.root / "input"))
        .writeStream.format("firesteel.files")
        .option("path", str(work / "out"))
        .option("guarantee", "exactly-once")
        .option("checkpointLocation", str(work / "checkpoint"))
    )


def _spark(session: Any, work: Path) -> Any:
    return (
        session.readStream.schema("seq long")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(_DATA.root and _DATA.root / "input"))
        .writeStream.format("parquet")
        .option("path", str(work / "out"))
        .option("checkpointLocation", str(work / "checkpoint"))
    )


def workloads(quick: bool) -> list[Workload]:
    """One workload: ms per batch at the end of a long query, firesteel vs Spark's own."""
    batches, window = QUICK if quick else FULL
    return [
        Workload(
            group="batches",
            name=f"ms per batch, last {window} of {batches} tiny batches (files -> files)",
            unit="ms",
            baseline_name="Spark parquet source/sink",
            goal=None,
            issue="issue 12",
            firesteel=lambda: _run("firesteel", _firesteel),
            baseline=lambda: _run("spark", _spark),
            lower_is_better=True,
            repetitions=1,
            warmup=0,
        )
    ]
