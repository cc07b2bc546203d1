"""The stateful operator inside real Structured Streaming queries (Spark local mode).

Input: JSON files read by Spark's file source, one file per micro-batch.
Output: ``foreachBatch`` writing ``<out>/batch=N`` with overwrite (idempotent per batch).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from pyspark import cloudpickle

from firesteel.backends import FilesystemBackend, HeapBackend
from firesteel.backends.inspect import read_state
from firesteel.core.errors import ConfigError
from firesteel.state import (
    KeyedProcessor,
    KeyState,
    ListStateDescriptor,
    ValueStateDescriptor,
    stateful,
)

# Spark's Python workers cannot import this test module by name: ship it by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

INPUT_SCHEMA = "sensor string, value double, seq long"
COUNT_SCHEMA = "sensor string, count long, total double"


class RunningCount(KeyedProcessor):
    count = ValueStateDescriptor("count", int)
    total = ValueStateDescriptor("total", float)

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        count = state.value(self.count)
        total = state.value(self.total)
        count.update((count.value() or 0) + rows.num_rows)
        total.update((total.value() or 0.0) + sum(rows.column("value").to_pylist()))
        yield {"sensor": key[0], "count": count.value(), "total": total.value()}


class FailsOn(RunningCount):
    """Raises on a poison record unless the flag file exists."""

    def __init__(self, flag: str) -> None:
        self.flag = flag

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        if "poison" in key[0] and not Path(self.flag).exists():
            raise ValueError("cannot handle this reading")
        return super().process(key, rows, state)


class WrongOutput(KeyedProcessor):
    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        return [{"sensor": key[0], "count": "many", "total": 1.0}]


class SessionTimeout(KeyedProcessor):
    """Collects seqs per key; a timer 1 ms after the batch emits and clears them."""

    seen = ListStateDescriptor("seen", int)
    input_format = "pandas"

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        state.list(self.seen).extend(int(s) for s in rows["seq"])
        state.register_timer(state.processing_time_ms + 1)
        return None

    def on_timer(self, key: Any, timestamp_ms: int, state: KeyState) -> Any:
        seen = state.list(self.seen)
        out = [{"sensor": key[0], "seqs": ",".join(map(str, sorted(seen.get())))}]
        seen.clear()
        return out


class ReportsTimerClock(KeyedProcessor):
    """Sets a timer 1 ms after each batch; on_timer reports the processing time it saw."""

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        state.register_timer(state.processing_time_ms + 1)
        return None

    def on_timer(self, key: Any, timestamp_ms: int, state: KeyState) -> Any:
        return [{"sensor": key[0], "now": state.processing_time_ms}]


class RecordsCallOrder(KeyedProcessor):
    """Emits, per key, its position among this task's ``process`` calls and its rows' seqs."""

    def open(self, ctx: Any) -> None:
        self.calls = 0

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        seqs = ",".join(str(s) for s in rows.column("seq").to_pylist())
        yield {"sensor": key[0], "call": self.calls, "seqs": seqs}
        self.calls += 1


def write_inputs(folder: Path, files: list[list[tuple[str, float]]], start: int = 0) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    seq = start
    for index, readings in enumerate(files):
        lines = []
        for sensor, value in readings:
            lines.append(json.dumps({"sensor": sensor, "value": value, "seq": seq}))
            seq += 1
        path = folder / f"part-{start:06d}-{index:04d}.json"
        path.write_text("\n".join(lines) + "\n")
        # Spark's file source orders files by modification time: make it the file order.
        stamp = time.time() - 1000 + start + index
        os.utime(path, (stamp, stamp))
    return seq


def run_query(
    spark: Any,
    src: Path,
    root: Path,
    processor: KeyedProcessor,
    *,
    parallelism: int | None = 2,
    schema: str = COUNT_SCHEMA,
    backend: Any = None,
    restore_from: str | None = None,
    checkpoint: str = "checkpoint",
    files_per_batch: int = 1,
    **options: Any,
) -> None:
    """Run ``processor`` over the JSON files in ``src`` until they are consumed; ``options``
    go to :func:`stateful` (a broadcast input)."""
    backend = backend or FilesystemBackend(f"file://{root}/state")
    df = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", files_per_batch)
    out = stateful(
        df.json(str(src)),
        key=["sensor"],
        processor=processor,
        output_schema=schema,
        backend=backend,
        name="counts",
        parallelism=parallelism,
        max_parallelism=16,
        restore_from=restore_from,
        **options,
    )
    target = str(root / "out")

    def sink(batch_df: Any, batch_id: int) -> None:
        batch_df.write.mode("overwrite").parquet(f"{target}/batch={batch_id}")

    query = (
        out.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(root / checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    finally:
        query.stop()


def latest_counts(root: Path) -> dict[str, tuple[int, float]]:
    table = ds.dataset(root / "out", format="parquet", partitioning="hive").to_table()
    latest: dict[str, tuple[int, int, float]] = {}
    for row in table.to_pylist():
        previous = latest.get(row["sensor"])
        if previous is None or row["batch"] > previous[0]:
            latest[row["sensor"]] = (row["batch"], row["count"], row["total"])
    return {sensor: (count, total) for sensor, (_, count, total) in latest.items()}


def expected_counts(files: list[list[tuple[str, float]]]) -> dict[str, tuple[int, float]]:
    result: dict[str, tuple[int, float]] = {}
    for readings in files:
        for sensor, value in readings:
            count, total = result.get(sensor, (0, 0.0))
            result[sensor] = (count + 1, total + value)
    return result


def readings(batch: int, sensors: int = 12) -> list[tuple[str, float]]:
    return [(f"s{(batch * 5 + i) % sensors}", float(batch + i)) for i in range(sensors)]


def test_running_count_restart_and_rescale(spark: Any, tmp_path: Path) -> None:
    src = tmp_path / "in"
    first = [readings(b) for b in range(3)]
    write_inputs(src, first)
    run_query(spark, src, tmp_path, RunningCount(), parallelism=2)
    assert latest_counts(tmp_path) == expected_counts(first)

    second = [readings(b) for b in range(3, 6)]
    write_inputs(src, second, start=1000)
    run_query(spark, src, tmp_path, RunningCount(), parallelism=3)
    assert latest_counts(tmp_path) == expected_counts(first + second)

    third = [readings(b) for b in range(6, 8)]
    write_inputs(src, third, start=2000)
    run_query(spark, src, tmp_path, RunningCount(), parallelism=1)
    assert latest_counts(tmp_path) == expected_counts(first + second + third)

    inspected = read_state(f"file://{tmp_path}/state").to_pandas()
    counts = inspected[inspected["state"] == "count"]
    assert {
        json.loads(k)[0]: int(v) for k, v in zip(counts["key"], counts["value"], strict=True)
    } == {sensor: count for sensor, (count, _) in expected_counts(first + second + third).items()}


def test_keys_come_in_order_of_first_appearance_and_rows_in_input_order(
    spark: Any, tmp_path: Path
) -> None:
    """Pins the call order documented in :mod:`firesteel.state.processor`."""
    src = tmp_path / "in"
    write_inputs(src, [[("c", 1.0), ("a", 1.0), ("b", 1.0), ("a", 1.0), ("c", 1.0)]])
    schema = "sensor string, call long, seqs string"
    run_query(spark, src, tmp_path, RecordsCallOrder(), parallelism=1, schema=schema)
    table = ds.dataset(tmp_path / "out", format="parquet", partitioning="hive").to_table()
    calls = sorted((r["call"], r["sensor"], r["seqs"]) for r in table.to_pylist())
    assert calls == [(0, "c", "0,4"), (1, "a", "1,3"), (2, "b", "2")]


def test_default_parallelism_follows_the_state_not_a_changed_session(
    spark: Any, tmp_path: Path
) -> None:
    src = tmp_path / "in"
    write_inputs(src, [readings(0)])
    previous = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        spark.conf.set("spark.sql.shuffle.partitions", "3")
        run_query(spark, src, tmp_path, RunningCount(), parallelism=None)
        spark.conf.set("spark.sql.shuffle.partitions", "5")
        write_inputs(src, [readings(1)], start=1000)
        run_query(spark, src, tmp_path, RunningCount(), parallelism=None)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", previous)
    newest = max((tmp_path / "state").rglob("v*"), key=lambda p: p.name)
    assert len(list(newest.glob("*.snap"))) == 3
    assert latest_counts(tmp_path) == expected_counts([readings(0), readings(1)])


def test_processor_error_names_operator_key_and_batch_and_retry_is_clean(
    spark: Any, tmp_path: Path
) -> None:
    src = tmp_path / "in"
    files = [readings(0), [*readings(1), ("poison-1", 5.0)], readings(2)]
    write_inputs(src, files)
    flag = tmp_path / "fixed"
    with pytest.raises(
        Exception,
        match=r"operator 'counts': process\(\) raised on key \('poison-1',\) in batch 1: "
        r"ValueError",
    ):
        run_query(spark, src, tmp_path, FailsOn(str(flag)))
    assert not (tmp_path / "out" / "batch=1" / "_SUCCESS").exists()
    flag.touch()
    run_query(spark, src, tmp_path, FailsOn(str(flag)))
    assert latest_counts(tmp_path) == expected_counts(files)


def test_output_not_matching_schema_names_the_column(spark: Any, tmp_path: Path) -> None:
    src = tmp_path / "in"
    write_inputs(src, [readings(0)])
    with pytest.raises(Exception, match="output column 'count' expects int64, got str 'many'"):
        run_query(spark, src, tmp_path, WrongOutput())


def test_timers_fire_in_a_later_batch(spark: Any, tmp_path: Path) -> None:
    src = tmp_path / "in"
    write_inputs(src, [[("a", 1.0), ("b", 1.0)], [("a", 2.0)], [("c", 3.0)]])
    run_query(
        spark,
        src,
        tmp_path,
        SessionTimeout(),
        schema="sensor string, seqs string",
        backend=HeapBackend(str(tmp_path / "heap")),
    )
    table = ds.dataset(tmp_path / "out", format="parquet", partitioning="hive").to_table()
    fired = sorted((r["batch"], r["sensor"], r["seqs"]) for r in table.to_pylist())
    # batch 0 sees a,b (seq 0,1); batch 1 fires them, then sees a (2); batch 2 fires a, sees c.
    assert fired == [(1, "a", "0"), (1, "b", "1"), (2, "a", "2")]


def batch_timestamps(checkpoint: Path) -> dict[int, int]:
    """batchTimestampMs of every batch in Spark's offsets log (Spark's record, not ours)."""
    stamps = {}
    for entry in (checkpoint / "offsets").iterdir():
        if entry.name.isdigit():
            metadata = json.loads(entry.read_text().splitlines()[1])
            stamps[int(entry.name)] = int(metadata["batchTimestampMs"])
    return stamps


def test_timers_of_partitions_without_records_fire_at_the_batch_timestamp(
    spark: Any, tmp_path: Path
) -> None:
    """A re-run must fire the same timers: an idle partition uses Spark's batch time too."""
    src = tmp_path / "in"
    sensors = [f"s{i}" for i in range(16)]
    write_inputs(src, [[(s, 1.0) for s in sensors], [("s0", 2.0)], [("s0", 3.0)]])
    run_query(
        spark,
        src,
        tmp_path,
        ReportsTimerClock(),
        parallelism=4,
        schema="sensor string, now long",
        backend=HeapBackend(str(tmp_path / "heap")),
    )
    table = ds.dataset(tmp_path / "out", format="parquet", partitioning="hive").to_table()
    stamps = batch_timestamps(tmp_path / "checkpoint")
    fired = table.to_pylist()
    # Batch 1 has one record, so three of the four partitions get none, yet all 16 fire.
    assert sorted(r["sensor"] for r in fired if r["batch"] == 1) == sorted(sensors)
    assert {(r["batch"], r["now"]) for r in fired} == {(1, stamps[1]), (2, stamps[2])}


def test_stateful_validates_its_arguments(spark: Any, tmp_path: Path) -> None:
    df = spark.readStream.schema(INPUT_SCHEMA).json(str(tmp_path))
    backend = FilesystemBackend(str(tmp_path / "state"))
    with pytest.raises(ConfigError, match="key column 'sensr'"):
        stateful(
            df, key="sensr", processor=RunningCount(), output_schema=COUNT_SCHEMA, backend=backend
        )
    with pytest.raises(ConfigError, match="parallelism must be in"):
        stateful(
            df,
            key="sensor",
            processor=RunningCount(),
            output_schema=COUNT_SCHEMA,
            backend=backend,
            parallelism=20,
            max_parallelism=16,
        )
