"""Event-time windows: firesteel's ``WindowAggregate`` beside Spark's window aggregations.

Goals (issue 49): a 1-minute tumbling count per key with a 10-second out-of-orderness
bound at least 1.0x Spark's ``groupBy(window(...)).count()`` with ``withWatermark``, and
a session window at least 1.0x Spark's ``session_window`` and 5x
``transformWithStateInPandas`` with ``TimeMode.EventTime`` doing the same sessions.

Every side reads the same events ``(seq, key, ts)`` from Parquet files with Spark's file
source (``Trigger.AvailableNow``, 5 micro-batches), assigns the same windows, emits each
window once when the watermark passes its end (append mode) and writes the results with
Spark's Parquet file sink, so the sink's cost is the same on every side. The output of
every run is read back with pyarrow and checked equal to a plain-Python reference (every
window the watermark closed before the last batch, with its count): a faster side that
emitted less or other results fails the workload instead of winning it.

- firesteel: ``stateful(..., processor=WindowAggregate(...), event_time="ts",
  watermark=BoundedOutOfOrderness(10 s), late="drop")`` on the heap and the RocksDB
  backend;
- Spark: ``withWatermark("ts", "10 seconds")`` then ``groupBy("key", window(ts, "1
  minute")).count()`` or ``session_window(ts, gap)``, on Spark's default (HDFS-backed)
  state store beside firesteel's heap backend and on its RocksDB store beside firesteel's
  RocksDB backend;
- ``transformWithStateInPandas`` (``TimeMode.EventTime``, RocksDB store, the only one
  it runs on): a ``StatefulProcessor`` keeping a key's open sessions in list state with an
  event-time timer at each session's end.

The session is the benchmarks' one for every side: its Python workers fork from
firesteel's worker daemon (``firesteel.core.WORKER_DAEMON``, in ``LOCAL_PROFILE``), as the
operations guide tells a firesteel job to run (Spark's window aggregations start no Python
worker). Before the first workload both engines run the tumbling count once on the quick
input (not timed), so the first workload's side does not alone pay the session's first
query: the JVM compiling the file source, the shuffle and the sink, the first workers. Each
workload beside Spark's window aggregations then runs each side once untimed on the full
input before its timed runs (``warmup=1``): the side that runs first would otherwise pay
alone the JIT compilation, at full size, of the paths both share (the file source, the
shuffle, the sink); then three timed runs of each side, the median reported (one run of
each moved by 10-15% between runs of the same code on a quiet machine). The workload
beside ``transformWithStateInPandas`` runs once, its ratio far from its goal either way.

Spark runs a batch without data after the last one when its watermark moved
(``noDataMicroBatches``), firesteel's operator only runs in batches with input: the group
turns those extra batches off, so every side emits exactly what the watermark of the
last data batch closed. Event times are multiples of 7 ms, so no two records of a key
are exactly the session gap (30 s) apart, where engines may differ on whether sessions
that touch merge. PyFlink is not a side: its Python keyed process function ran the
keyed count at about 800 events/s here (the peers group), hours for this input.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark import cloudpickle

from benchmarks import spark
from benchmarks.framework import Measure, Workload, measured_once
from benchmarks.keyed import DEFAULT_PROVIDER, PROVIDER_CONF, ROCKSDB_PROVIDER, Scratch
from firesteel.backends import HeapBackend
from firesteel.core.errors import MissingDependencyError
from firesteel.state import BoundedOutOfOrderness, stateful
from firesteel.state.backend import StateBackend
from firesteel.state.windows import (
    Count,
    EventTimeSessionWindows,
    TumblingEventTimeWindows,
    WindowAggregate,
    WindowAssigner,
)

try:
    from firesteel.rocksdb import RocksDBBackend
except ModuleNotFoundError as exc:
    raise MissingDependencyError(exc.name or "firesteel.rocksdb", "-e ./backends/rocksdb") from exc

# Spark's Python workers cannot import this module by name (benchmarks/ is not installed).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

BATCHES = 5
BOUND_MS = 10_000
TUMBLE_MS = 60_000
GAP_MS = 30_000
TICK_MS = 7
"""Every event time is a multiple of this: never exactly :data:`GAP_MS` apart."""
JITTER_MS = 8_995
"""Each event is up to this far behind the sequence's clock: always within the bound."""
START_MS = 1_767_225_600_004
"""2026-01-01T00:00:00.004Z, a multiple of :data:`TICK_MS`."""
GROUP_CONF = {
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
}
"""Set for the group's run: no batch without data (see above); timestamps handed to
``transformWithStateInPandas`` in UTC."""
OUTPUT = "key string, window_start timestamp, window_end timestamp, count long"


@dataclass(frozen=True)
class Size:
    """An input: ``events`` over ``keys`` keys in ``files`` files spanning ``minutes`` of
    event time."""

    events: int
    keys: int
    files: int
    minutes: int


FULL = Size(5_000_000, 100_000, 20, 10)
QUICK = Size(4_000, 100, 10, 10)

_DIRS = Scratch()
_closed: dict[str, int] = {}
"""The watermark the last data batch runs with (``"ms"``): what the sides have emitted."""


def setup(quick: bool) -> AbstractContextManager[None]:
    """A scratch folder and Spark's no-data batches turned off, for the group's run; both
    engines warmed up first unless ``quick``."""
    return _group(QUICK if quick else FULL, warm_up=not quick)


@contextmanager
def _group(size: Size, *, warm_up: bool) -> Iterator[None]:
    with _DIRS.around_group("firesteel-bench-windows-"):
        session = spark.session()
        for name, value in GROUP_CONF.items():
            session.conf.set(name, value)
        try:
            assert _DIRS.root is not None
            if warm_up:
                _warm_up(_DIRS.root / "warm-up")
            _write_events(_DIRS.root / "events", size)
            _DIRS.events = size.events
            yield
        finally:
            for name in GROUP_CONF:
                session.conf.unset(name)


def _warm_up(folder: Path) -> None:
    """Both engines' paths run once, on the quick input, before any workload: otherwise the
    first workload's side alone pays the session's first query (the JVM compiling the file
    source, the shuffle and the Parquet sink; the first Python workers forked)."""
    events = folder / "events"
    _write_events(events, QUICK)
    _closed.clear()
    sides = {
        "firesteel": _windows(_stream(events), "tumbling", _heap(folder / "firesteel")),
        "spark": _spark_window("tumbling", _stream(events)),
    }
    for name, frame in sides.items():
        spark.available_now(partial(_writer, frame, folder / name / "out"), folder / name / "cp")


def _write_events(folder: Path, size: Size) -> None:
    """Files of consecutive events, their modification times in event-time order (the
    file source's batches take the oldest files first)."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(49)
    per_file = -(-size.events // size.files)
    ticks = size.minutes * 60_000 // TICK_MS
    first_batches = size.files - size.files // BATCHES
    for index, start in enumerate(range(0, size.events, per_file)):
        rows = min(per_file, size.events - start)
        seq = np.arange(start, start + rows, dtype=np.int64)
        clock = seq * ticks // size.events - rng.integers(0, JITTER_MS // TICK_MS + 1, rows)
        ts = START_MS + clock * TICK_MS
        if index < first_batches:
            _closed["ms"] = max(_closed.get("ms", 0), int(ts.max()) - BOUND_MS)
        table = pa.table(
            {
                "seq": seq,
                "key": pa.array(np.char.add("key-", rng.integers(0, size.keys, rows).astype(str))),
                "ts": pa.array(ts, pa.timestamp("ms", tz="UTC")),
            }
        )
        path = folder / f"part-{index:05d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (1_000_000 + index, 1_000_000 + index))


def reference(events: pa.Table, kind: str, closed_ms: int) -> pd.DataFrame:
    """The windows of ``events`` whose end is at or before ``closed_ms`` (Spark's
    watermark, the largest event time seen minus the bound), with their counts, in plain
    Python (pandas): ``key``, ``start``, ``end`` (epoch ms), ``count``, sorted."""
    frame = pd.DataFrame(
        {"key": events.column("key").to_numpy(), "ts": _millis(events.column("ts"))}
    )
    if kind == "tumbling":
        frame["start"] = frame["ts"] - frame["ts"] % TUMBLE_MS
        found = frame.groupby(["key", "start"], as_index=False).size()
        found["end"] = found["start"] + TUMBLE_MS
    else:
        frame = frame.sort_values(["key", "ts"], kind="stable")
        new = (frame["key"] != frame["key"].shift()) | (frame["ts"].diff() > GAP_MS)
        frame["session"] = new.cumsum()
        found = frame.groupby("session", as_index=False).agg(
            key=("key", "first"), start=("ts", "min"), last=("ts", "max"), size=("ts", "size")
        )
        found["end"] = found["last"] + GAP_MS
    found = found.rename(columns={"size": "count"})[["key", "start", "end", "count"]]
    return _sorted(found[found["end"] <= closed_ms])


def _millis(column: Any) -> np.ndarray:
    """Epoch milliseconds of an Arrow timestamp column (Spark's Parquet writes them without
    a time zone, as UTC)."""
    return column.cast(pa.timestamp("ms", tz=column.type.tz)).cast(pa.int64()).to_numpy()


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.astype({"start": "int64", "end": "int64", "count": "int64"})
    return frame.sort_values(["key", "start"], kind="stable").reset_index(drop=True)


def _emitted(folder: Path) -> pd.DataFrame:
    """What a side wrote, read with pyarrow (Spark's sink log aside)."""
    table = ds.dataset(folder, format="parquet").to_table()
    return _sorted(
        pd.DataFrame(
            {
                "key": table.column("key").to_numpy(zero_copy_only=False),
                "start": _millis(table.column("window_start")),
                "end": _millis(table.column("window_end")),
                "count": table.column("count").to_numpy(),
            }
        )
    )


_expected: dict[str, pd.DataFrame] = {}


def _check(kind: str, folder: Path, side: str) -> None:
    if kind not in _expected:
        assert _DIRS.root is not None
        events = ds.dataset(_DIRS.root / "events", format="parquet").to_table()
        _expected[kind] = reference(events, kind, _closed["ms"])
    expected, found = _expected[kind], _emitted(folder)
    if not found.equals(expected):
        merged = expected.merge(found, how="outer", indicator=True)
        wrong = merged[merged["_merge"] != "both"]
        msg = (
            f"{kind} windows, {side}: {len(found)} results, the reference has {len(expected)};"
            f" {len(wrong)} differ, e.g.\n{wrong.head(5)}"
        )
        raise RuntimeError(msg)


# -- the sides ---------------------------------------------------------------------------


def _assigner(kind: str) -> WindowAssigner:
    if kind == "tumbling":
        return TumblingEventTimeWindows(dt.timedelta(milliseconds=TUMBLE_MS))
    return EventTimeSessionWindows(dt.timedelta(milliseconds=GAP_MS))


def _stream(folder: Path | None = None) -> Any:
    if folder is None:
        assert _DIRS.root is not None
        folder = _DIRS.root / "events"
    files = len(list(folder.glob("*.parquet")))
    return (
        spark.session()
        .readStream.schema("seq long, key string, ts timestamp")
        .option("maxFilesPerTrigger", max(1, files // BATCHES))
        .parquet(str(folder))
    )


def _writer(frame: Any, out: Path) -> Any:
    """The sink every side writes with: Spark's Parquet files, append mode."""
    return frame.writeStream.format("parquet").option("path", str(out)).outputMode("append")


def _run(kind: str, side: str, frame: Any, work: Path) -> float:
    out = work / "out"
    query, elapsed = spark.available_now(partial(_writer, frame, out), work / "checkpoint")
    read = spark.rows_read(query)
    if read != _DIRS.events:
        msg = f"{kind} windows, {side}: the query read {read} events of {_DIRS.events}"
        raise RuntimeError(msg)
    _check(kind, out, side)
    return _DIRS.events / elapsed


def _windows(frame: Any, kind: str, backend: StateBackend) -> Any:
    return stateful(
        frame,
        key="key",
        processor=WindowAggregate(_assigner(kind), Count()),
        output_schema=OUTPUT,
        backend=backend,
        name="windows",
        event_time="ts",
        watermark=BoundedOutOfOrderness(dt.timedelta(milliseconds=BOUND_MS)),
        late="drop",
    )


def _firesteel(kind: str, backend: Callable[[Path], StateBackend]) -> float:
    work = _DIRS.fresh(f"firesteel-{kind}")
    return _run(kind, "firesteel", _windows(_stream(), kind, backend(work)), work)


def _heap(work: Path) -> StateBackend:
    return HeapBackend(str(work / "state"))


def _rocksdb(work: Path) -> StateBackend:
    return RocksDBBackend(f"file://{work}/state", local_dir=str(work / "rocksdb"))


def _spark_window(kind: str, frame: Any) -> Any:
    from pyspark.sql import functions as F

    watermarked = frame.withWatermark("ts", f"{BOUND_MS // 1000} seconds")
    if kind == "tumbling":
        window = F.window("ts", f"{TUMBLE_MS // 1000} seconds")
    else:
        window = F.session_window("ts", f"{GAP_MS // 1000} seconds")
    counted = watermarked.groupBy("key", window.alias("w")).count()
    return counted.select(
        "key",
        F.col("w.start").alias("window_start"),
        F.col("w.end").alias("window_end"),
        "count",
    )


def _session_processor() -> Any:
    """``transformWithStateInPandas``' session counter (built here: its base class needs
    pyspark). A key's open sessions ``(start, end, count)`` are its list state, each with an
    event-time timer at its end, which emits and forgets it."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class SessionCount(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.handle = handle
            self.sessions = handle.getListState("sessions", "start long, end long, count long")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            sessions = [tuple(s) for s in self.sessions.get()]
            for _, end, _ in sessions:
                self.handle.deleteTimer(end)
            times = np.sort(np.concatenate([_millis(pa.array(f["ts"])) for f in rows]))
            for ts in times.tolist():
                start, end, count = ts, ts + GAP_MS, 1
                kept = []
                for other in sessions:
                    if other[0] <= end and other[1] >= start:
                        start, end = min(start, other[0]), max(end, other[1])
                        count += other[2]
                    else:
                        kept.append(other)
                sessions = [*kept, (start, end, count)]
            self.sessions.clear()
            self.sessions.put(sessions)
            for _, end, _ in sessions:
                self.handle.registerTimer(end)
            return iter(())

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Any:
            expiry = expiredTimerInfo.getExpiryTimeInMs()
            sessions = [tuple(s) for s in self.sessions.get()]
            done = [s for s in sessions if s[1] <= expiry]
            self.sessions.clear()
            self.sessions.put([s for s in sessions if s[1] > expiry])
            if done:
                yield pd.DataFrame(
                    {
                        "key": [key[0]] * len(done),
                        "window_start": pd.to_datetime([s[0] for s in done], unit="ms", utc=True),
                        "window_end": pd.to_datetime([s[1] for s in done], unit="ms", utc=True),
                        "count": [s[2] for s in done],
                    }
                )

        def close(self) -> None:
            return None

    return SessionCount()


def _transform_with_state(kind: str, frame: Any) -> Any:
    try:
        import google.protobuf  # noqa: F401  (Spark's Python workers need it for this API)
    except ModuleNotFoundError as exc:
        raise MissingDependencyError("google.protobuf", "protobuf") from exc
    return (
        frame.withWatermark("ts", f"{BOUND_MS // 1000} seconds")
        .groupBy("key")
        .transformWithStateInPandas(
            statefulProcessor=_session_processor(),
            outputStructType=OUTPUT,
            outputMode="Append",
            timeMode="EventTime",
        )
    )


def _on_spark(kind: str, build: Callable[[str, Any], Any], provider: str) -> float:
    session = spark.session()
    session.conf.set(PROVIDER_CONF, provider)
    try:
        return _run(kind, "spark", build(kind, _stream()), _DIRS.fresh(f"spark-{kind}"))
    finally:
        session.conf.unset(PROVIDER_CONF)


@dataclass(frozen=True)
class _Side:
    kind: str
    backend: str
    name: str
    build: Callable[[str, Any], Any]
    provider: str
    goal: float


def _sides(quick: bool) -> list[_Side]:
    window = "Spark groupBy(window(...)).count() with withWatermark"
    session = "Spark groupBy(session_window(...)).count() with withWatermark"
    tws = "PySpark transformWithStateInPandas, TimeMode.EventTime (RocksDB store)"
    # The issue's three comparisons first, so a run cut short keeps them.
    sides = [
        _Side("tumbling", "heap", window, _spark_window, DEFAULT_PROVIDER, 1.0),
        _Side("session", "rocksdb", tws, _transform_with_state, ROCKSDB_PROVIDER, 5.0),
        _Side("session", "heap", session, _spark_window, DEFAULT_PROVIDER, 1.0),
        _Side(
            "tumbling", "rocksdb", f"{window} (RocksDB store)", _spark_window, ROCKSDB_PROVIDER, 1.0
        ),
        _Side(
            "session", "rocksdb", f"{session} (RocksDB store)", _spark_window, ROCKSDB_PROVIDER, 1.0
        ),
    ]
    # A quick run proves each kind of side runs and checks equal, on the smallest input.
    return sides[:2] if quick else sides


def workloads(quick: bool) -> list[Workload]:
    """The tumbling count and the session window, each firesteel backend beside the Spark
    side on the matching store, and the sessions beside ``transformWithStateInPandas``."""
    size = QUICK if quick else FULL
    backends = {"heap": _heap, "rocksdb": _rocksdb}
    ours: dict[tuple[str, str], Measure] = {}
    result = []
    for side in _sides(quick):
        mine = (side.kind, side.backend)
        if mine not in ours:
            measure: Measure = partial(_firesteel, side.kind, backends[side.backend])
            ours[mine] = measured_once(measure) if quick else measure
        what = "1-minute tumbling count" if side.kind == "tumbling" else "30 s session count"
        once = quick or side.build is _transform_with_state
        result.append(
            Workload(
                group="windows",
                name=(
                    f"{what}, {size.events:,} events, {size.keys:,} keys, "
                    f"bound 10 s, {side.backend}"
                ),
                unit="events/s",
                baseline_name=side.name,
                goal=side.goal,
                issue="issue 49",
                firesteel=ours[mine],
                baseline=partial(_on_spark, side.kind, side.build, side.provider),
                repetitions=1 if once else 3,
                warmup=0 if once else 1,
            )
        )
    return result
