"""Two keyed inputs: a CoProcessor sharing the key's state and timers, and the interval join,
at the operator task level (no Spark) against a plain-Python reference, across a rescale, on
the dict backends (the windows' tests run the same map states and timers on RocksDB). The
real query of two streams is the interval-join example (``tests/test_examples_event_time.py``).
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
from test_state_backends import make_backend
from test_state_event_time import BASE, MAX_P, key_group

from firesteel.backends import FilesystemBackend
from firesteel.backends.inspect import read_state
from firesteel.core.context import TaskScope
from firesteel.core.errors import ConfigError
from firesteel.state import (
    BoundedOutOfOrderness,
    KeyedProcessor,
    KeyState,
    TimeDomain,
    ValueStateDescriptor,
    stateful,
)
from firesteel.state import eventtime as et
from firesteel.state.backend import KeyedTask, OperatorSpec, StateBackend
from firesteel.state.coprocess import SIDE_COLUMN, CoProcessor
from firesteel.state.joins import IntervalJoin
from firesteel.state.keygroups import KeyGroupRange, operator_index
from firesteel.state.operator import BATCH_TIME_COLUMN, KEY_GROUP_COLUMN, OperatorTask, run_task

cloudpickle.register_pickle_by_value(sys.modules[__name__])

TS = pa.timestamp("us", tz="UTC")
BOUND_MS = 2_000
LOWER_MS, UPPER_MS = -1_000, 3_000
SIDE = ("k", "ts", "v")
JOINED = pa.schema(
    [("k", pa.string()), ("ts", TS), ("v", pa.int64()), ("right_ts", TS), ("right_v", pa.int64())]
)
LATE_TYPE = pa.struct(
    [("k", pa.string()), ("ts", TS), ("v", pa.int64()), (SIDE_COLUMN, pa.string())]
)
Record = tuple[str, str, int, int]
"""``(side, key, event ms, v)``."""


def operator_for(
    processor: CoProcessor, backend: StateBackend, parallelism: int, schema: pa.Schema = JOINED
) -> OperatorTask:
    times = et.EventTime("ts", BoundedOutOfOrderness(BOUND_MS * dt.timedelta(milliseconds=1)))
    return OperatorTask(
        OperatorSpec("joined", ("k",), MAX_P, parallelism),
        processor,
        backend,
        schema,
        event_time=times,
        late_type=LATE_TYPE,
        sides=(SIDE, SIDE),
    )


def run_batch(operator: OperatorTask, batch: int, records: list[Record]) -> list[dict[str, Any]]:
    """Every partition of ``batch`` as the shuffle feeds it: its records of both inputs, then
    one tick per input (the largest event time of each)."""
    ticks = [
        max(r[2] for r in records if r[0] == side)
        for side in ("left", "right")
        if any(r[0] == side for r in records)
    ]
    parallelism = operator.spec.parallelism
    out: list[dict[str, Any]] = []
    for partition in range(parallelism):
        mine = [
            r for r in records if operator_index(key_group(r[1]), parallelism, MAX_P) == partition
        ]
        rows = len(mine) + len(ticks)
        batch_rows = pa.RecordBatch.from_arrays(
            [
                pa.array([r[1] for r in mine] + [None] * len(ticks), pa.string()),
                pa.array([r[2] * 1000 for r in mine] + [None] * len(ticks), pa.int64()).cast(TS),
                pa.array([r[3] for r in mine] + [None] * len(ticks), pa.int64()),
                pa.array([r[0] for r in mine] + [None] * len(ticks), pa.string()),
                pa.array([None] * len(mine) + ticks, pa.int64()),
                pa.array(
                    [key_group(r[1]) for r in mine] + [-partition - 1] * len(ticks), pa.int32()
                ),
                pa.array([(1_000 + batch) * 1000] * rows, pa.int64()).cast(TS),
            ],
            names=[
                "k",
                "ts",
                "v",
                SIDE_COLUMN,
                et.TICK_COLUMN,
                KEY_GROUP_COLUMN,
                BATCH_TIME_COLUMN,
            ],
        )
        task = KeyedTask(
            TaskScope("q", batch, partition, 0),
            KeyGroupRange.for_partition(partition, parallelism, MAX_P),
        )
        for produced in run_task(operator, task, iter([batch_rows])):
            out.extend(produced.to_pylist())
    return out


def join_reference(batches: list[list[Record]]) -> list[Counter[tuple[Any, ...]]]:
    """Per batch: the pairs of on-time records (same key, ``a.ts + lower <= b.ts <= a.ts +
    upper``) whose later record arrived in it, and the late records."""
    max_seen: int | None = None
    seen: list[tuple[Record, int]] = []
    out = []
    for n, records in enumerate(batches):
        mark = None if max_seen is None else max_seen - BOUND_MS - 1
        found: Counter[tuple[Any, ...]] = Counter()
        for record in records:
            if mark is not None and record[2] <= mark:
                found[("late", record[0], record[1], record[3])] += 1
            else:
                seen.append((record, n))
        for a, batch_a in seen:
            for b, batch_b in seen:
                if (
                    a[0] == "left"
                    and b[0] == "right"
                    and a[1] == b[1]
                    and n == max(batch_a, batch_b)
                    and a[2] + LOWER_MS <= b[2] <= a[2] + UPPER_MS
                ):
                    found[("pair", a[1], a[3], b[3])] += 1
        latest = max((r[2] for r in records), default=None)
        if latest is not None and (max_seen is None or latest > max_seen):
            max_seen = latest
        out.append(found)
    return out


def observed(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    found: Counter[tuple[Any, ...]] = Counter()
    for row in rows:
        late = row.get(et.LATE_COLUMN)
        if late is not None:
            found[("late", late[SIDE_COLUMN], late["k"], late["v"])] += 1
        else:
            found[("pair", row["k"], row["v"], row["right_v"])] += 1
    return found


def two_inputs(seed: int = 5, batches: int = 8) -> list[list[Record]]:
    rng = random.Random(seed)
    out, v = [], 0
    for n in range(batches):
        records = []
        for _ in range(rng.randint(4, 9)):
            v += 1
            side = rng.choice(["left", "right"])
            records.append(
                (side, f"k{rng.randrange(4)}", BASE + n * 1_500 + rng.randint(-4_000, 1_000), v)
            )
        out.append(records)
    out.append([("left", "k0", BASE + 60_000, 1_000)])  # event time leaps: every buffer purges
    out.append([("right", "k0", BASE + 61_000, 1_001)])
    return out


@pytest.mark.parametrize("kind", ["heap", "filesystem"])
def test_interval_join_matches_the_reference_and_purges_by_watermark(
    tmp_path: Path, kind: str
) -> None:
    batches = two_inputs()
    expected = join_reference(batches)
    assert sum(c for e in expected for k, c in e.items() if k[0] == "pair") > 5
    assert any(k[0] == "late" for e in expected for k in e)
    backend = make_backend(kind, tmp_path)
    join = IntervalJoin(
        LOWER_MS * dt.timedelta(milliseconds=1), UPPER_MS * dt.timedelta(milliseconds=1)
    )
    for n, records in enumerate(batches):
        rows = run_batch(operator_for(join, backend, parallelism=3 if n < 4 else 2), n, records)
        assert observed(rows) == expected[n], f"batch {n}"
    left = [
        r
        for r in read_state(backend.location, "joined").to_pylist()
        if r["state"] in ("left", "right")
    ]
    # Only the records of the leap are still waiting for a match.
    assert len(left) <= 2, left


class PaymentTimeout(CoProcessor):
    """Left: orders; right: payments. An order not paid within 5 s of event time times out;
    an order and its payment share the key's state and its event-time timer."""

    due = ValueStateDescriptor("due", int)

    def process_left(self, key: Any, rows: Any, state: KeyState) -> Any:
        deadline = max(et.epoch_ms(rows.column("ts")).to_pylist()) + 5_000
        state.value(self.due).update(deadline)
        state.register_event_time_timer(deadline)

    def process_right(self, key: Any, rows: Any, state: KeyState) -> Any:
        deadline = state.value(self.due).value()
        if deadline is not None:
            state.delete_event_time_timer(deadline)
            state.value(self.due).clear()
            yield {"k": key[0], "outcome": "paid"}

    def on_timer(self, key: Any, timestamp_ms: int, state: KeyState) -> Any:
        assert state.time_domain is TimeDomain.EVENT_TIME
        state.value(self.due).clear()
        yield {"k": key[0], "outcome": "timeout"}


def test_both_inputs_share_the_key_s_state_and_timers(tmp_path: Path) -> None:
    schema = pa.schema([("k", pa.string()), ("outcome", pa.string())])
    backend = make_backend("filesystem", tmp_path)
    op = operator_for(PaymentTimeout(), backend, 2, schema)
    assert run_batch(op, 0, [("left", "a", BASE, 1), ("left", "b", BASE, 2)]) == []
    rows = run_batch(op, 1, [("right", "a", BASE + 1_000, 3)])
    assert main(rows) == [{"k": "a", "outcome": "paid"}]
    rows = run_batch(op, 2, [("right", "x", BASE + 8_000, 4)])
    assert rows == []  # W(2) = BASE + 1000 - 2001: b's timer (BASE + 5000) waits
    # W(3) = BASE + 5999, at three partitions: b's timer fires, a's was deleted by its payment.
    rows = run_batch(operator_for(PaymentTimeout(), backend, 3, schema), 3, [])
    assert main(rows) == [{"k": "b", "outcome": "timeout"}]


def main(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != et.LATE_COLUMN} for row in rows]


def test_two_input_arguments_are_checked(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="lower 0:00:02 is above upper"):
        IntervalJoin(dt.timedelta(seconds=2), dt.timedelta(seconds=1))
    (tmp_path / "l").mkdir()
    (tmp_path / "r").mkdir()
    left = spark.readStream.schema("k string, ts timestamp, v long").json(str(tmp_path / "l"))
    right = spark.readStream.schema("k string, ts timestamp, v string").json(str(tmp_path / "r"))
    common: dict[str, Any] = {
        "key": "k",
        "output_schema": "k string",
        "backend": FilesystemBackend(str(tmp_path / "state")),
    }
    join = IntervalJoin(dt.timedelta(0), dt.timedelta(seconds=1))
    with pytest.raises(ConfigError, match="'v' is bigint in the left input and string"):
        stateful(left, processor=join, right=right, **common)
    with pytest.raises(ConfigError, match="takes two inputs: give right="):
        stateful(left, processor=join, **common)
    with pytest.raises(ConfigError, match="needs a CoProcessor"):
        stateful(left, processor=PlainProcessor(), right=left, **common)
    with pytest.raises(ConfigError, match="event_time column 'ts' is not in the right input"):
        stateful(
            left,
            processor=join,
            right=left.drop("ts"),
            event_time="ts",
            watermark=BoundedOutOfOrderness(dt.timedelta(seconds=1)),
            **common,
        )


class PlainProcessor(KeyedProcessor):
    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        return None
