"""Event-time windows (tumbling, sliding, session) with allowed lateness, at the operator task
level (no Spark), against a plain-Python reference
(:class:`~firesteel.testing.windows.WindowReference`) fed the same batches, on every
backend, across a rescale, a re-run and a restore from a savepoint on another backend.
"""

from __future__ import annotations

import datetime as dt
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark import cloudpickle
from test_state_backends import BACKENDS, make_backend
from test_state_event_time import BASE, MAX_P, key_group, staged

from firesteel.backends import FilesystemBackend
from firesteel.backends.inspect import read_state
from firesteel.backends.savepoint import create
from firesteel.core.context import TaskScope
from firesteel.core.errors import ConfigError
from firesteel.state import BoundedOutOfOrderness, stateful
from firesteel.state import eventtime as et
from firesteel.state.backend import KeyedTask, OperatorSpec, StateBackend
from firesteel.state.keygroups import KeyGroupRange, operator_index
from firesteel.state.operator import OperatorTask, run_task
from firesteel.state.savepoint import SavepointRestore
from firesteel.state.windows import (
    IS_FINAL,
    AggregateFunction,
    Count,
    EventTimeSessionWindows,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    WindowAggregate,
)
from firesteel.testing.windows import CountAndSum, Record, WindowReference, records_of

cloudpickle.register_pickle_by_value(sys.modules[__name__])

BOUND_MS = 2_000
LATENESS_MS = 4_000
TS = pa.timestamp("us", tz="UTC")
OUTPUT = pa.schema(
    [
        ("k", pa.string()),
        ("window_start", TS),
        ("window_end", TS),
        ("count", pa.int64()),
        ("seq_sum", pa.int64()),
    ]
)
LATE_TYPE = pa.struct([("k", pa.string()), ("ts", TS), ("v", pa.int64())])
SECONDS = dt.timedelta(seconds=1)
MS = dt.timedelta(milliseconds=1)

ASSIGNERS = {
    "tumbling": (TumblingEventTimeWindows(5 * SECONDS), {"size": 5_000}),
    "sliding": (SlidingEventTimeWindows(6 * SECONDS, 2 * SECONDS), {"size": 6_000, "slide": 2_000}),
    "session": (EventTimeSessionWindows(3 * SECONDS), {"size": 3_000}),
}


def window_job(
    backend: StateBackend,
    kind: str,
    parallelism: int,
    late: str = "side-output",
    restore: SavepointRestore | None = None,
    aggregate: AggregateFunction | None = None,
) -> OperatorTask:
    assigner, _ = ASSIGNERS[kind]
    processor = WindowAggregate(
        assigner, aggregate or CountAndSum("v"), allowed_lateness=LATENESS_MS * MS
    )
    spec = OperatorSpec("windows", ("k",), MAX_P, parallelism)
    times = et.EventTime("ts", BoundedOutOfOrderness(BOUND_MS * MS), late)  # type: ignore[arg-type]
    return OperatorTask(
        spec,
        processor,
        backend,
        OUTPUT,
        restore=restore,
        event_time=times,
        late_type=LATE_TYPE if late == "side-output" else None,
    )


def run_batch(
    operator: OperatorTask, batch: int, records: list[tuple[str, int]] | list[Record]
) -> list[dict[str, Any]]:
    """Every partition of ``batch``, as Spark's shuffle would feed them (two input tasks);
    ``v`` of a record is its seq (its position in the batch if not given)."""
    triples = [r if len(r) == 3 else (r[0], r[1], i) for i, r in enumerate(records)]
    parallelism = operator.spec.parallelism
    half = max(1, len(triples) // 2)
    ticks = [max(r[1] for r in part) for part in (triples[:half], triples[half:]) if part]
    out: list[dict[str, Any]] = []
    for partition in range(parallelism):
        mine = [
            r for r in triples if operator_index(key_group(r[0]), parallelism, MAX_P) == partition
        ]
        task = KeyedTask(
            TaskScope("q", batch, partition, 0),
            KeyGroupRange.for_partition(partition, parallelism, MAX_P),
        )
        staged_batch = staged(batch, [(k, t) for k, t, _ in mine], ticks, partition)
        seqs = pa.array([v for _, _, v in mine] + [None] * len(ticks), pa.int64())
        staged_batch = staged_batch.set_column(2, "v", seqs)
        for rows in run_task(operator, task, iter([staged_batch])):
            out.extend(rows.to_pylist())
    return out


def millis(stamp: dt.datetime) -> int:
    return round(stamp.timestamp() * 1000)


def observed(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """Each late record and window result as the plain-Python reference names it (a result
    with ``is_final`` false is an ``early`` one)."""
    found: Counter[tuple[Any, ...]] = Counter()
    for row in rows:
        late = row.get(et.LATE_COLUMN)
        if late is not None:
            found[("late", late["k"], millis(late["ts"]), late["v"])] += 1
        else:
            what = "window" if row.get(IS_FINAL, True) else "early"
            start, end = millis(row["window_start"]), millis(row["window_end"])
            found[(what, row["k"], start, end, row["count"], row["seq_sum"])] += 1
    return found


def out_of_order(seed: int = 7, batches: int = 9) -> list[list[Record]]:
    """Records of 6 keys moving forward ~2 s a batch, spread over 18 s (so some are late,
    some within the allowed lateness and some beyond it), with gaps that close sessions."""
    rng = random.Random(seed)
    out = []
    for n in range(batches):
        records = []
        for key in (f"k{i}" for i in range(6)):
            if rng.random() < 0.25:
                continue  # the key is quiet this batch: its sessions may close
            for _ in range(rng.randint(1, 4)):
                records.append((key, BASE + n * 2_000 + rng.randint(-16_000, 2_000)))
        out.append(records)
    out.append([("k0", BASE + 60_000)])  # event time leaps: every window comes due, then expires
    out.append([("k0", BASE + 61_000)])
    return records_of(out)


def reference_for(kind: str) -> WindowReference:
    return WindowReference(kind, bound=BOUND_MS, lateness=LATENESS_MS, **ASSIGNERS[kind][1])


@pytest.mark.parametrize(("kind", "backend_kind"), list(zip(ASSIGNERS, BACKENDS, strict=True)))
def test_windows_match_the_reference_across_a_rescale(
    tmp_path: Path, kind: str, backend_kind: str
) -> None:
    batches = out_of_order()
    reference = reference_for(kind)
    backend = make_backend(backend_kind, tmp_path)
    outputs = Counter()
    for n, records in enumerate(batches):
        # Three partitions, then two: windows and their timers move with their key groups.
        operator = window_job(backend, kind, parallelism=3 if n < 5 else 2)
        rows = run_batch(operator, n, records)
        expected = Counter(reference.batch(records))
        assert observed(rows) == expected, f"batch {n}"
        outputs.update(expected)
    kinds = Counter(e[0] for e in outputs)
    assert kinds["late"] and kinds["window"]
    # Some window emitted more than once: a late record within the allowed lateness.
    assert any(c > 1 for c in Counter(e[1:4] for e in outputs if e[0] == "window").values())
    # Every window but those of the leap expired: their state is gone.
    left = read_state(backend.location, "windows").to_pylist()
    kept = [int(r["user_key"]) for r in left if r["state"] == "windows"]
    assert kept and min(kept) >= BASE + 50_000, kept


def test_a_record_within_the_allowed_lateness_re_emits_beyond_it_goes_to_the_side_output(
    tmp_path: Path,
) -> None:
    operator = window_job(make_backend("heap", tmp_path), "tumbling", parallelism=1)
    start = BASE - BASE % 5_000
    end = start + 5_000
    assert run_batch(operator, 0, [("a", start + 1, 1), ("a", start + 2, 2)]) == []
    assert run_batch(operator, 1, [("b", end + 2_000, 3)]) == []
    # W(2) = end + 2000 - bound - 1 = end - 1: the window is due; its timer fires.
    rows = run_batch(operator, 2, [("b", end + 2_001, 4)])
    assert observed(rows) == Counter({("window", "a", start, end, 2, 3): 1})
    # W(3) = end: behind the watermark, within the lateness (end - 1 + 4000 > W): re-emitted.
    rows = run_batch(operator, 3, [("a", start + 3, 5), ("a", start + 4, 6), ("b", end + 6_000, 7)])
    assert observed(rows) == Counter({("window", "a", start, end, 4, 14): 1})
    # W(4) = end + 3999 = end - 1 + lateness: expired, purged by its timer: the record is late.
    rows = run_batch(operator, 4, [("a", start + 5, 8), ("b", end + 7_000, 9)])
    assert observed(rows) == Counter({("late", "a", start + 5, 8): 1})
    rows = run_batch(operator, 5, [("a", start + 6, 10)])
    assert observed(rows) == Counter(
        {("late", "a", start + 6, 10): 1, ("window", "b", end, end + 5_000, 2, 7): 1}
    )


def test_windows_travel_in_a_savepoint_to_another_backend(tmp_path: Path) -> None:
    batches = out_of_order(seed=11)
    reference = reference_for("session")
    source = make_backend("filesystem", tmp_path / "source")
    for n, records in enumerate(batches[:5]):
        reference.batch(records)
        run_batch(window_job(source, "session", parallelism=3), n, records)
    create(source.location, str(tmp_path / "savepoint"), batch=4)
    target = make_backend("rocksdb", tmp_path / "target")
    restore = SavepointRestore(str(tmp_path / "savepoint"))
    for n, records in enumerate(batches[5:], 5):
        rows = run_batch(window_job(target, "session", 2, restore=restore), n, records)
        assert observed(rows) == Counter(reference.batch(records)), f"batch {n}"


def test_a_rerun_of_a_batch_emits_the_same_windows(tmp_path: Path) -> None:
    batches = out_of_order(seed=3)
    backend = make_backend("filesystem", tmp_path)
    for n, records in enumerate(batches[:6]):
        first = run_batch(window_job(backend, "session", 2), n, records)
    again = run_batch(window_job(backend, "session", 3), 5, batches[5])
    assert observed(again) == observed(first)


def test_rejected_late_records_are_dropped_and_counted_with_late_drop(tmp_path: Path) -> None:
    backend = make_backend("filesystem", tmp_path)
    operator = window_job(backend, "tumbling", parallelism=2, late="drop")
    run_batch(operator, 0, [("a", BASE)])
    for _ in range(2):  # a re-run does not count twice
        rows = run_batch(operator, 1, [("a", BASE - 60_000), ("b", BASE - 50_000), ("a", BASE + 1)])
    assert et.LATE_COLUMN not in (rows[0] if rows else {})
    counted = read_state(backend.location, "windows").to_pylist()
    assert sum(int(r["value"]) for r in counted if r["state"] == et.LATE_DROPPED.name) == 2


def test_records_without_event_time_go_to_the_side_output(tmp_path: Path) -> None:
    operator = window_job(make_backend("heap", tmp_path), "tumbling", parallelism=1)
    batch = staged(0, [("a", BASE), ("a", BASE)], [BASE], 0)
    stamps = batch.column(1).to_pylist()
    stamps[0] = None
    batch = batch.set_column(1, "ts", pa.array(stamps, TS))
    task = KeyedTask(TaskScope("q", 0, 0, 0), KeyGroupRange.for_partition(0, 1, MAX_P))
    rows = [r for b in run_task(operator, task, iter([batch])) for r in b.to_pylist()]
    assert [r[et.LATE_COLUMN]["ts"] for r in rows] == [None]


class NoMerge(AggregateFunction):
    def create_accumulator(self) -> Any:
        return 0

    def add(self, value: dict[str, Any], accumulator: Any) -> Any:
        return accumulator + 1

    def get_result(self, accumulator: Any) -> dict[str, Any]:
        return {"count": accumulator}


def test_window_arguments_are_checked(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="slide 0:00:10 is longer than size"):
        SlidingEventTimeWindows(5 * SECONDS, 10 * SECONDS)
    with pytest.raises(ConfigError, match="size must be at least 1 ms"):
        TumblingEventTimeWindows(dt.timedelta(0))
    with pytest.raises(ConfigError, match="NoMerge has no merge"):
        WindowAggregate(EventTimeSessionWindows(SECONDS), NoMerge())
    with pytest.raises(ConfigError, match="allowed_lateness must be a timedelta >= 0"):
        WindowAggregate(TumblingEventTimeWindows(SECONDS), Count(), allowed_lateness=-SECONDS)
    df = spark.readStream.schema("k string, ts timestamp, v long").json(str(tmp_path))
    common: dict[str, Any] = {
        "key": "k",
        "processor": WindowAggregate(TumblingEventTimeWindows(SECONDS), Count()),
        "output_schema": "k string, window_start timestamp, window_end timestamp, count long",
        "backend": FilesystemBackend(str(tmp_path / "state")),
    }
    with pytest.raises(ConfigError, match="WindowAggregate works in event time"):
        stateful(df, **common)
    with pytest.raises(ConfigError, match="late='process' does not apply"):
        stateful(
            df, **common, event_time="ts", watermark=BoundedOutOfOrderness(SECONDS), late="process"
        )
