"""The keyed count end to end, shared by the ``state`` and ``rocksdb`` groups.

Events ``(seq, key)`` in Parquet files are read by Spark's file source with
``Trigger.AvailableNow`` in 5 micro-batches and counted per key; every side
emits the updated count of every key it saw into the ``noop`` sink each batch,
with ``spark.sql.shuffle.partitions`` partitions. Events per second. Sides:

- firesteel's :func:`~firesteel.state.stateful` on the group's backend;
- PySpark ``applyInPandasWithState`` and Spark's built-in ``groupBy().count()``
  (the JVM ceiling), on the state store provider that matches the backend
  (Spark's default HDFS-backed store for heap state, its RocksDB store for
  RocksDB);
- PySpark ``transformWithStateInPandas``, which Spark runs on its RocksDB store
  only (it needs ``protobuf`` in the Python workers).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import cloudpickle

from benchmarks import spark
from benchmarks.framework import Measure, Workload, measured_once
from firesteel.core.errors import MissingDependencyError
from firesteel.state import KeyedProcessor, KeyState, ValueStateDescriptor, stateful
from firesteel.state.backend import StateBackend

# Spark's Python workers cannot import this module by name (benchmarks/ is not installed).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
DEFAULT_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
BATCHES = 5


@dataclass
class Scratch:
    """A group's scratch folder: fresh subfolders per run, and the events of the workload."""

    root: Path | None = None
    events: int = 0
    runs: int = 0

    def fresh(self, name: str) -> Path:
        """A new, empty folder ``<root>/<name>-<n>``."""
        assert self.root is not None
        self.runs += 1
        path = self.root / f"{name}-{self.runs}"
        path.mkdir(parents=True)
        return path

    @contextmanager
    def around_group(self, prefix: str) -> Iterator[None]:
        """The folder exists for the group's run and is removed afterwards."""
        self.root = Path(tempfile.mkdtemp(prefix=prefix))
        try:
            yield
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None


class KeyedCount(KeyedProcessor):
    """Counts events per key; emits the key's new count once per batch."""

    count = ValueStateDescriptor("count", int)

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        count = state.value(self.count)
        total = (count.value() or 0) + rows.num_rows
        count.update(total)
        return ((key[0], total),)


def _count_with_pandas_state(key: Any, frames: Any, state: Any) -> Any:
    import pandas as pd

    total = state.get[0] if state.exists else 0
    for frame in frames:
        total += len(frame)
    state.update((total,))
    yield pd.DataFrame({"key": [key[0]], "count": [total]})


def _count_processor() -> Any:
    """``transformWithStateInPandas``' processor (built here: its base class needs pyspark)."""
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class CountProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.count = handle.getValueState("count", "count long")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            total = self.count.get()[0] if self.count.exists() else 0
            for frame in rows:
                total += len(frame)
            self.count.update((total,))
            yield pd.DataFrame({"key": [key[0]], "count": [total]})

        def close(self) -> None:
            return None

    return CountProcessor()


def _write_events(folder: Path, events: int, keys: int, files: int) -> None:
    folder.mkdir(parents=True)
    per_file = -(-events // files)
    rng = np.random.default_rng(7)
    for index, start in enumerate(range(0, events, per_file)):
        rows = min(per_file, events - start)
        key_ids = rng.integers(0, keys, rows)
        table = pa.table(
            {
                "seq": np.arange(start, start + rows, dtype=np.int64),
                "key": pa.array(np.char.add("key-", key_ids.astype(str))),
            }
        )
        pq.write_table(table, folder / f"part-{index:05d}.parquet")


@contextmanager
def _events(scratch: Scratch, events: int, keys: int, files: int) -> Iterator[None]:
    assert scratch.root is not None
    spark.session()
    _write_events(scratch.root / "events", events, keys, files)
    scratch.events = events
    try:
        yield
    finally:
        shutil.rmtree(scratch.root / "events", ignore_errors=True)


def _stream(scratch: Scratch, files_per_batch: int) -> Any:
    assert scratch.root is not None
    return (
        spark.session()
        .readStream.schema("seq long, key string")
        .option("maxFilesPerTrigger", files_per_batch)
        .parquet(str(scratch.root / "events"))
    )


def _run(scratch: Scratch, frame: Any, mode: str, work: Path) -> float:
    query, elapsed = spark.available_now(
        lambda: frame.writeStream.format("noop").outputMode(mode), work / "checkpoint"
    )
    processed = spark.rows_read(query)
    if processed != scratch.events:
        msg = f"keyed count: the query read {processed} events of {scratch.events}"
        raise RuntimeError(msg)
    return scratch.events / elapsed


def _firesteel_count(
    scratch: Scratch, files_per_batch: int, backend: Callable[[Path], StateBackend]
) -> float:
    work = scratch.fresh("e2e-firesteel")
    counted = stateful(
        _stream(scratch, files_per_batch),
        key="key",
        processor=KeyedCount(),
        output_schema="key string, count long",
        backend=backend(work),
        name="count",
    )
    return _run(scratch, counted, "append", work)


def _on_provider(
    scratch: Scratch, files_per_batch: int, build: Callable[[Any], Any], provider: str
) -> float:
    session = spark.session()
    session.conf.set(PROVIDER_CONF, provider)
    try:
        frame = build(_stream(scratch, files_per_batch))
        return _run(scratch, frame, "update", scratch.fresh("e2e-spark"))
    finally:
        session.conf.unset(PROVIDER_CONF)


def _pandas_state(frame: Any) -> Any:
    return frame.groupBy("key").applyInPandasWithState(
        _count_with_pandas_state,
        outputStructType="key string, count long",
        stateStructType="count long",
        outputMode="update",
        timeoutConf="NoTimeout",
    )


def _transform_with_state(frame: Any) -> Any:
    try:
        import google.protobuf  # noqa: F401  (Spark's Python workers need it for this API)
    except ModuleNotFoundError as exc:
        raise MissingDependencyError("google.protobuf", "protobuf") from exc
    return frame.groupBy("key").transformWithStateInPandas(
        statefulProcessor=_count_processor(),
        outputStructType="key string, count long",
        outputMode="Update",
        timeMode="None",
    )


def _builtin_count(frame: Any) -> Any:
    return frame.groupBy("key").count()


@dataclass(frozen=True)
class Alternative:
    """A Spark side of the keyed count: what a user would pick instead of firesteel."""

    name: str
    build: Callable[[Any], Any]
    provider: str
    goal: float | None = None
    issue: str | None = None


def alternatives(rocksdb: bool, goals: dict[str, tuple[float, str]]) -> list[Alternative]:
    """The three Spark sides on the store matching firesteel's backend; ``goals`` by API."""
    store, label = (ROCKSDB_PROVIDER, "RocksDB store") if rocksdb else (DEFAULT_PROVIDER, "")
    suffix = f" ({label})" if label else ""
    sides = [
        ("applyInPandasWithState", f"PySpark applyInPandasWithState{suffix}", _pandas_state, store),
        (
            "transformWithStateInPandas",
            "PySpark transformWithStateInPandas (RocksDB store)",
            _transform_with_state,
            ROCKSDB_PROVIDER,
        ),
        ("count", f"Spark groupBy().count(){suffix}", _builtin_count, store),
    ]
    result = []
    for api, name, build, provider in sides:
        goal, issue = goals.get(api, (None, None))
        result.append(Alternative(name, build, provider, goal, issue))
    return result


def keyed_count_workloads(
    group: str,
    scratch: Scratch,
    sizes: list[tuple[int, int, int]],
    backend: Callable[[Path], StateBackend],
    sides: list[Alternative],
    quick: bool = False,
) -> list[Workload]:
    """One workload per (events, keys, files) size and Spark side, one run per side.

    One run each: Spark's Python stateful operators need minutes for 5M events.
    A ``quick`` run proves each path runs and measures nothing, so firesteel's
    side runs once per size and its figure stands beside every Spark side.
    """
    result = []
    for events, keys, files in sizes:
        per_batch = max(1, files // BATCHES)
        ours: Measure = partial(_firesteel_count, scratch, per_batch, backend)
        if quick:
            ours = measured_once(ours)
        for side in sides:
            result.append(
                Workload(
                    group=group,
                    name=f"keyed count, {events:,} events, {keys:,} keys",
                    unit="events/s",
                    baseline_name=side.name,
                    goal=side.goal,
                    issue=side.issue,
                    firesteel=ours,
                    baseline=lambda side=side, per_batch=per_batch: _on_provider(
                        scratch, per_batch, side.build, side.provider
                    ),
                    repetitions=1,
                    warmup=0,
                    setup=lambda events=events, keys=keys, files=files: _events(
                        scratch, events, keys, files
                    ),
                )
            )
    return result
