"""Event time in the stateful operator, driven at the operator task level (no Spark).

Each "batch" is run the way Spark runs it: every operator partition gets its key groups'
records plus a copy of every input task's tick row, and :func:`run_task` does the rest
against a real backend on disk (heap, filesystem, rocksdb). Outputs are checked against
a plain-Python reference fed the same batches: the watermark of each batch, every
event-time timer fired once at the right watermark in timestamp order before the input,
every late record in the side output once; also across a rescale and a re-run. One real
Structured Streaming query (Spark local mode) checks the same against the same reference.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyspark import cloudpickle
from test_state_backends import BACKENDS, make_backend

from firesteel.backends import FilesystemBackend
from firesteel.backends.inspect import read_state
from firesteel.backends.savepoint import create
from firesteel.core.context import TaskScope
from firesteel.core.errors import ConfigError
from firesteel.state import (
    BoundedOutOfOrderness,
    KeyedProcessor,
    KeyState,
    TimeDomain,
    ValueStateDescriptor,
    late_output,
    main_output,
    stateful,
)
from firesteel.state import eventtime as et
from firesteel.state.backend import KeyedTask, OperatorSpec, StateBackend
from firesteel.state.keygroups import KeyGroupRange, operator_index
from firesteel.state.operator import (
    BATCH_TIME_COLUMN,
    KEY_GROUP_COLUMN,
    OperatorTask,
    run_task,
)
from firesteel.state.savepoint import SavepointRestore

# Spark's Python workers cannot import this test module by name: ship it by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

MAX_P = 16
GAP_MS = 5_000
BOUND = dt.timedelta(seconds=2)
BOUND_MS = 2_000
TS = pa.timestamp("us", tz="UTC")
INPUT = pa.schema([("k", pa.string()), ("ts", TS), ("v", pa.int64())])
OUTPUT = pa.schema(
    [
        ("k", pa.string()),
        ("kind", pa.string()),
        ("at", pa.int64()),
        ("watermark", pa.int64()),
        ("n", pa.int64()),
    ]
)
LATE_TYPE = pa.struct(list(INPUT))


class TimeoutDetector(KeyedProcessor):
    """Emits ``seen`` per key and batch, and ``timeout`` when a key saw no event for
    ``GAP_MS`` of event time (one event-time timer per key, moved on each event)."""

    deadline = ValueStateDescriptor("deadline", int)

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        times = et.epoch_ms(rows.column("ts")).to_pylist()
        deadline = state.value(self.deadline)
        latest = max(times) + GAP_MS
        old = deadline.value()
        if old is None or latest > old:
            if old is not None:
                state.delete_event_time_timer(old)
            state.register_event_time_timer(latest)
            deadline.update(latest)
        late = sum(rows.column("__late").to_pylist()) if "__late" in rows.column_names else 0
        yield {
            "k": key[0],
            "kind": "seen",
            "at": None,
            "watermark": state.watermark_ms,
            "n": len(times) * 1000 + late,
        }

    def on_timer(self, key: Any, timestamp_ms: int, state: KeyState) -> Any:
        assert state.time_domain is TimeDomain.EVENT_TIME
        assert state.event_time_timers() == []
        state.value(self.deadline).clear()
        yield {
            "k": key[0],
            "kind": "timeout",
            "at": timestamp_ms,
            "watermark": state.watermark_ms,
            "n": None,
        }


def key_group(key: str) -> int:
    return zlib.crc32(key.encode()) % MAX_P


class Job:
    """Runs batches of an event-time operator task by task, as Spark would."""

    def __init__(
        self,
        backend: StateBackend,
        parallelism: int,
        late: str = "side-output",
        processor: KeyedProcessor | None = None,
        restore: SavepointRestore | None = None,
    ) -> None:
        self.backend = backend
        self.parallelism = parallelism
        self.late = late
        self.processor = processor or TimeoutDetector()
        self.restore = restore

    def run(
        self, batch: int, records: list[tuple[str, int]], input_tasks: int = 2
    ) -> list[dict[str, Any]]:
        """Run ``batch`` over ``records`` ``(key, event ms)``; the rows every partition emitted."""
        spec = OperatorSpec("op", ("k",), MAX_P, self.parallelism)
        times = et.EventTime("ts", et.BoundedOutOfOrderness(BOUND), self.late)  # type: ignore[arg-type]
        late_type = LATE_TYPE if self.late == "side-output" else None
        operator = OperatorTask(
            spec,
            self.processor,
            self.backend,
            OUTPUT,
            restore=self.restore,
            event_time=times,
            late_type=late_type,
        )
        # The input tasks' ticks: the largest event time of each task's slice of the input.
        share = max(1, -(-len(records) // input_tasks))
        ticks = [max(t for _, t in records[i : i + share]) for i in range(0, len(records), share)]
        out: list[dict[str, Any]] = []
        for partition in range(self.parallelism):
            mine = [
                (k, t)
                for k, t in records
                if operator_index(key_group(k), self.parallelism, MAX_P) == partition
            ]
            task = KeyedTask(
                TaskScope("q", batch, partition, 0),
                KeyGroupRange.for_partition(partition, self.parallelism, MAX_P),
            )
            for row_batch in run_task(
                operator, task, iter([staged(batch, mine, ticks, partition)])
            ):
                out.extend(row_batch.to_pylist())
        return out


def staged(
    batch: int, records: list[tuple[str, int]], ticks: list[int], partition: int
) -> pa.RecordBatch:
    """What firesteel's shuffle hands one operator partition: its records, then the ticks."""
    keys = [k for k, _ in records] + [None] * len(ticks)
    stamps = [t * 1000 for _, t in records] + [None] * len(ticks)
    groups = [key_group(k) for k, _ in records] + [-partition - 1] * len(ticks)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.string()),
            pa.array(stamps, pa.int64()).cast(TS),
            pa.array(range(len(keys)), pa.int64()),
            pa.array([None] * len(records) + ticks, pa.int64()),
            pa.array(groups, pa.int32()),
            pa.array([(1_000 + batch) * 1000] * len(keys), pa.int64()).cast(TS),
        ],
        names=["k", "ts", "v", et.TICK_COLUMN, KEY_GROUP_COLUMN, BATCH_TIME_COLUMN],
    )


def reference(batches: list[list[tuple[str, int]]]) -> list[list[tuple[Any, ...]]]:
    """The same job in plain Python: per batch, the fired timeouts, seen counts and late records."""
    max_seen: int | None = None
    deadlines: dict[str, int] = {}
    results = []
    for records in batches:
        watermark = None if max_seen is None else max_seen - BOUND_MS - 1
        out: list[tuple[Any, ...]] = []
        if watermark is not None:
            for key, when in sorted(deadlines.items(), key=lambda item: item[1]):
                if when <= watermark:
                    out.append(("timeout", key, when, watermark))
                    del deadlines[key]
        on_time: dict[str, list[int]] = {}
        for key, when in records:
            if watermark is not None and when <= watermark:
                out.append(("late", key, when))
            else:
                on_time.setdefault(key, []).append(when)
        for key, times in on_time.items():
            deadlines[key] = max(deadlines.get(key, 0), max(times) + GAP_MS)
            out.append(("seen", key, len(times) * 1000, watermark))
        batch_max = max((t for _, t in records), default=None)
        if batch_max is not None and (max_seen is None or batch_max > max_seen):
            max_seen = batch_max
        results.append(sorted(out, key=repr))
    return results


def observed(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for row in rows:
        late = row.get(et.LATE_COLUMN)
        if late is not None:
            stamp = late["ts"]
            out.append(("late", late["k"], int(stamp.timestamp() * 1000)))
        elif row["kind"] == "timeout":
            out.append(("timeout", row["k"], row["at"], row["watermark"]))
        else:
            out.append(("seen", row["k"], row["n"], row["watermark"]))
    return sorted(out, key=repr)


BASE = 1_800_000_000_000
"""An event time origin (epoch ms)."""


def out_of_order_batches() -> list[list[tuple[str, int]]]:
    keys = [f"k{i}" for i in range(10)]
    batches = []
    for n in range(8):
        records = []
        for i, key in enumerate(keys):
            if (n + i) % 3:
                # Forward in time 1.5 s a batch, records spread over 6 s: some late.
                jump = 10_000 if n >= 6 else 0  # event time leaps: idle keys time out
                records.append((key, BASE + jump + n * 1_500 + (i * 397) % 6_000 - 3_000))
        if n == 5:
            records = records[:2]  # a quiet batch: other keys' timers come due
        batches.append(records)
    return batches


def timer_order(rows: list[dict[str, Any]]) -> list[int]:
    return [r["at"] for r in rows if r.get("kind") == "timeout"]


@pytest.mark.parametrize("kind", BACKENDS)
def test_watermark_timers_and_late_records_match_the_reference_across_a_rescale(
    tmp_path: Path, kind: str
) -> None:
    batches = out_of_order_batches()
    expected = reference(batches)
    assert any(e[0] == "late" for batch in expected for e in batch)
    assert any(e[0] == "timeout" for batch in expected for e in batch)
    backend = make_backend(kind, tmp_path)
    for n, records in enumerate(batches):
        # Rescale from 3 partitions to 2 half-way: watermark and timers move with key groups.
        job = Job(backend, parallelism=3 if n < 4 else 2)
        rows = job.run(n, records)
        assert observed(rows) == expected[n], f"batch {n}"


def test_watermark_and_event_time_timers_travel_in_a_savepoint_to_another_backend(
    tmp_path: Path,
) -> None:
    batches = out_of_order_batches()
    expected = reference(batches)
    source = make_backend("filesystem", tmp_path / "source")
    for n, records in enumerate(batches[:5]):
        Job(source, parallelism=3).run(n, records)
    create(source.location, str(tmp_path / "savepoint"), batch=4)
    target = make_backend("rocksdb", tmp_path / "target")
    restore = SavepointRestore(str(tmp_path / "savepoint"))
    for n, records in enumerate(batches[5:], 5):
        rows = Job(target, parallelism=2, restore=restore).run(n, records)
        assert observed(rows) == expected[n], f"batch {n}"


def test_a_rerun_of_a_batch_sees_the_same_watermark_and_fires_the_same_timers(
    tmp_path: Path,
) -> None:
    batches = out_of_order_batches()
    job = Job(make_backend("filesystem", tmp_path), parallelism=2)
    for n, records in enumerate(batches):
        first = job.run(n, records)
    again = job.run(7, batches[7])
    assert observed(again) == observed(first)
    assert any(r.get("kind") == "timeout" for r in again)


def test_event_time_timers_fire_in_timestamp_order_before_input(tmp_path: Path) -> None:
    job = Job(make_backend("heap", tmp_path), parallelism=1)
    job.run(0, [("a", BASE + 300), ("b", BASE + 100), ("c", BASE + 200)])
    assert timer_order(job.run(1, [("d", BASE + 20_000)])) == []
    rows = job.run(2, [("d", BASE + 20_001)])
    assert timer_order(rows) == [BASE + 100 + GAP_MS, BASE + 200 + GAP_MS, BASE + 300 + GAP_MS]
    assert [r["kind"] for r in rows] == ["timeout", "timeout", "timeout", "seen"]


def test_no_watermark_before_the_first_event_so_nothing_is_late(tmp_path: Path) -> None:
    job = Job(make_backend("heap", tmp_path), parallelism=1)
    rows = job.run(0, [("a", BASE), ("a", BASE - 60_000)])
    assert observed(rows) == [("seen", "a", 2000, None)]
    rows = job.run(1, [("a", BASE - BOUND_MS), ("a", BASE - BOUND_MS - 1)])
    # W(1) = BASE - bound - 1: a record exactly at the bound is on time, one ms more is late.
    assert observed(rows) == [
        ("late", "a", BASE - BOUND_MS - 1),
        ("seen", "a", 1000, BASE - BOUND_MS - 1),
    ]


def test_late_policy_drop_drops_and_process_flags(tmp_path: Path) -> None:
    backend = make_backend("filesystem", tmp_path / "drop")
    dropped = Job(backend, parallelism=2, late="drop")
    dropped.run(0, [("a", BASE)])
    late = [("a", BASE - 10_000), ("b", BASE - 9_000), ("c", BASE - 8_000)]
    for _ in range(2):  # a re-run of batch 1 does not count its drops twice
        rows = dropped.run(1, [*late, ("a", BASE + 1)])
    assert observed(rows) == [("seen", "a", 1000, BASE - BOUND_MS - 1)]
    assert et.LATE_COLUMN not in rows[0]
    counted = read_state(backend.location, "op").to_pylist()
    assert sum(int(r["value"]) for r in counted if r["state"] == et.LATE_DROPPED.name) == 3

    flagged = Job(make_backend("heap", tmp_path / "process"), parallelism=1, late="process")
    flagged.run(0, [("a", BASE)])
    rows = flagged.run(1, [("a", BASE - 10_000), ("a", BASE + 1)])
    # Both records reach process; the late one carries __late = true.
    assert observed(rows) == [("seen", "a", 2001, BASE - BOUND_MS - 1)]


class Chained(KeyedProcessor):
    """A timer that registers another one behind the watermark: it fires in the same batch."""

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        state.register_event_time_timer(BASE + 1)
        state.register_event_time_timer(BASE + 1)  # the same time twice: one timer

    def on_timer(self, key: Any, timestamp_ms: int, state: KeyState) -> Any:
        if timestamp_ms == BASE + 1:
            state.register_event_time_timer(BASE + 2)
        yield {
            "k": key[0],
            "kind": str(state.time_domain.value),
            "at": timestamp_ms,
            "watermark": state.watermark_ms,
            "n": None,
        }


def test_a_timer_registered_behind_the_watermark_in_on_timer_fires_in_the_same_batch(
    tmp_path: Path,
) -> None:
    job = Job(make_backend("heap", tmp_path), parallelism=1, processor=Chained())
    assert job.run(0, [("a", BASE)]) == []
    rows = job.run(1, [("b", BASE + 60_000)])
    assert rows == []  # the watermark of batch 1 is BASE - bound - 1: not yet
    rows = job.run(2, [])
    assert [(r["kind"], r["at"]) for r in rows] == [("event-time", BASE + 1)] * 2 + [
        ("event-time", BASE + 2)
    ] * 2
    assert sorted(r["k"] for r in rows) == ["a", "a", "b", "b"]


class NoEventTime(KeyedProcessor):
    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        state.register_event_time_timer(BASE)


def test_event_time_timers_without_event_time_say_how_to_enable_it(tmp_path: Path) -> None:
    spec = OperatorSpec("op", ("k",), MAX_P, 1)
    operator = OperatorTask(spec, NoEventTime(), make_backend("heap", tmp_path), OUTPUT)
    task = KeyedTask(TaskScope("q", 0, 0, 0), KeyGroupRange.for_partition(0, 1, MAX_P))
    batch = staged(0, [("a", BASE)], [], 0).drop_columns([et.TICK_COLUMN])
    with pytest.raises(ConfigError, match="event_time='<column>'"):
        list(run_task(operator, task, iter([batch])))


def test_watermark_strategy_and_policy_are_checked() -> None:
    with pytest.raises(ConfigError, match="timedelta >= 0"):
        BoundedOutOfOrderness(dt.timedelta(seconds=-1))
    with pytest.raises(ConfigError, match="side-output, drop, process"):
        et.EventTime("ts", BoundedOutOfOrderness(BOUND), "ignore")  # type: ignore[arg-type]
    assert BoundedOutOfOrderness(dt.timedelta(seconds=10)).watermark(20_000) == 9_999


def test_ticks_carry_each_input_task_s_largest_event_time() -> None:
    stamps = pa.array([5_000_999, None, 3_000_000], pa.int64()).cast(TS)
    batch = pa.RecordBatch.from_arrays(
        [pa.array(["a", "b", "c"]), stamps, pa.array([1, 2, 3])], schema=INPUT
    )
    out: Iterator[pa.RecordBatch] = et.EventTimeTicks("ts")(iter([batch]))
    rows = pa.Table.from_batches(list(out)).to_pylist()
    assert [r[et.TICK_COLUMN] for r in rows] == [None, None, None, 5_000]
    assert rows[-1]["k"] is None
    assert list(et.EventTimeTicks("ts")(iter([]))) == []


def test_ticks_flag_the_first_row_of_an_input_task_only() -> None:
    # The operator copies that row to every partition with the batch's time: one flag per
    # task, on its first row, whatever batch it comes in (an empty batch may come first).
    def batch(keys: list[str]) -> pa.RecordBatch:
        stamps = pa.array([1_000_000 * (i + 1) for i in range(len(keys))], pa.int64()).cast(TS)
        values = pa.array(range(len(keys)), pa.int64())
        return pa.RecordBatch.from_arrays(
            [pa.array(keys, pa.string()), stamps, values], schema=INPUT
        )

    out = et.EventTimeTicks("ts")(iter([batch([]), batch(["a", "b"]), batch(["c"])]))
    rows = pa.Table.from_batches(list(out)).to_pylist()
    assert [(r["k"], r[et.FIRST_ROW_COLUMN]) for r in rows] == [
        ("a", True),
        ("b", False),
        ("c", False),
        (None, False),
    ]


# -- one real query ----------------------------------------------------------------------------


def write_batches(folder: Path, batches: list[list[tuple[str, int]]], start: int) -> None:
    """One JSON file per micro-batch, in batch order (Spark's file source orders by mtime)."""
    folder.mkdir(parents=True, exist_ok=True)
    for n, records in enumerate(batches, start):
        path = folder / f"part-{n:04d}.json"
        lines = [
            json.dumps(
                {
                    "k": k,
                    "ts": f"{dt.datetime.fromtimestamp(t / 1000, dt.UTC):%Y-%m-%dT%H:%M:%S.%f}Z",
                    "v": i,
                }
            )
            for i, (k, t) in enumerate(records)
        ]
        path.write_text("\n".join(lines) + "\n")
        stamp = time.time() - 1000 + n
        os.utime(path, (stamp, stamp))


def run_event_time_query(spark: Any, src: Path, root: Path, parallelism: int) -> None:
    df = spark.readStream.schema("k string, ts timestamp, v long").option("maxFilesPerTrigger", 1)
    out = stateful(
        df.json(str(src)),
        key="k",
        processor=TimeoutDetector(),
        output_schema="k string, kind string, at long, watermark long, n long",
        backend=FilesystemBackend(f"file://{root}/state"),
        name="timeouts",
        parallelism=parallelism,
        max_parallelism=MAX_P,
        event_time="ts",
        watermark=BoundedOutOfOrderness(BOUND),
    )
    target = root / "out"

    def sink(batch_df: Any, batch_id: int) -> None:
        batch_df.persist()
        main_output(batch_df).write.mode("overwrite").parquet(f"{target}/main/batch={batch_id}")
        late_output(batch_df).write.mode("overwrite").parquet(f"{target}/late/batch={batch_id}")
        batch_df.unpersist()

    query = (
        out.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(root / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    finally:
        query.stop()


def test_a_real_query_matches_the_reference_across_a_restart_with_another_parallelism(
    spark: Any, tmp_path: Path
) -> None:
    batches = out_of_order_batches()
    src = tmp_path / "in"
    write_batches(src, batches[:4], 0)
    run_event_time_query(spark, src, tmp_path, parallelism=3)
    write_batches(src, batches[4:], 4)
    run_event_time_query(spark, src, tmp_path, parallelism=2)

    main = ds.dataset(tmp_path / "out" / "main", format="parquet", partitioning="hive").to_table()
    late = ds.dataset(tmp_path / "out" / "late", format="parquet", partitioning="hive").to_table()
    got: dict[int, list[dict[str, Any]]] = {}
    for row in main.to_pylist():
        got.setdefault(row.pop("batch"), []).append(row)
    for row in late.to_pylist():
        got.setdefault(row.pop("batch"), []).append({et.LATE_COLUMN: row})
    expected = reference(batches)
    assert {n: observed(rows) for n, rows in got.items()} == {
        n: e for n, e in enumerate(expected) if e
    }


def test_stateful_checks_its_event_time_arguments(spark: Any, tmp_path: Path) -> None:
    df = spark.readStream.schema("k string, ts timestamp, v long").json(str(tmp_path))
    common: dict[str, Any] = {
        "key": "k",
        "processor": TimeoutDetector(),
        "output_schema": "k string",
        "backend": FilesystemBackend(str(tmp_path / "state")),
    }
    strategy = BoundedOutOfOrderness(BOUND)
    with pytest.raises(ConfigError, match="needs a watermark strategy"):
        stateful(df, **common, event_time="ts")
    with pytest.raises(ConfigError, match="'v' is bigint; it must be a timestamp"):
        stateful(df, **common, event_time="v", watermark=strategy)
    with pytest.raises(ConfigError, match="'tz' is not in the input"):
        stateful(df, **common, event_time="tz", watermark=strategy)
    with pytest.raises(ConfigError, match="remove withWatermark"):
        stateful(df.withWatermark("ts", "1 minute"), **common, event_time="ts", watermark=strategy)
