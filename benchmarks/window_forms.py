"""The window operator's two forms on sparse batches: ``python -m benchmarks.window_forms
[KEYS] [TOUCHED]``.

A tumbling count (1-hour windows, so none closes) on the heap backend, one operator task run
in this process as Spark would run it (``run_task`` on what firesteel's shuffle hands a
partition): a first batch opens a window for each of ``KEYS`` keys, then five batches each
bring one record for ``TOUCHED`` random keys. Printed for the column form
(:mod:`firesteel.state.window_table`) and the per-key form (``columns=False``): the first
batch's seconds, the median of the sparse batches' and the state folder's size after them.
The column form reads and writes back every key group's window table in each batch, the
per-key form only the touched keys' entries (see docs/state/windows.md).
"""

from __future__ import annotations

import datetime as dt
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa

from firesteel.backends import HeapBackend
from firesteel.core.context import TaskScope
from firesteel.state import BoundedOutOfOrderness
from firesteel.state import eventtime as et
from firesteel.state.backend import KeyedTask, OperatorSpec
from firesteel.state.keygroups import DEFAULT_MAX_PARALLELISM, KeyGroupRange
from firesteel.state.operator import BATCH_TIME_COLUMN, KEY_GROUP_COLUMN, OperatorTask, run_task
from firesteel.state.windows import Count, TumblingEventTimeWindows, WindowAggregate

START_MS = 1_767_225_600_000
STAMP = pa.timestamp("ms", tz="UTC")
OUTPUT = pa.schema(
    [("k", pa.string()), ("window_start", STAMP), ("window_end", STAMP), ("count", pa.int64())]
)


def _operator(backend: HeapBackend, *, columns: bool) -> OperatorTask:
    processor = WindowAggregate(
        TumblingEventTimeWindows(dt.timedelta(hours=1)), Count(), columns=columns
    )
    times = et.EventTime("ts", BoundedOutOfOrderness(dt.timedelta(seconds=2)), "drop")
    spec = OperatorSpec("windows", ("k",), DEFAULT_MAX_PARALLELISM, 1)
    return OperatorTask(spec, processor, backend, OUTPUT, event_time=times)


def _batch(operator: OperatorTask, batch: int, keys: list[str], stamp_ms: int) -> float:
    """Seconds for one batch of one record per key (and the input task's tick)."""
    groups = [zlib.crc32(k.encode()) % DEFAULT_MAX_PARALLELISM for k in keys]
    rows = len(keys) + 1
    staged = pa.RecordBatch.from_arrays(
        [
            pa.array([*keys, None], pa.string()),
            pa.array([stamp_ms] * len(keys) + [None], pa.int64()).cast(STAMP),
            pa.array([None] * len(keys) + [stamp_ms], pa.int64()),
            pa.array([*groups, -1], pa.int32()),
            pa.array([START_MS + batch * 1000] * rows, pa.int64()).cast(STAMP),
        ],
        names=["k", "ts", et.TICK_COLUMN, KEY_GROUP_COLUMN, BATCH_TIME_COLUMN],
    )
    task = KeyedTask(
        TaskScope("window-forms", batch, 0, 0),
        KeyGroupRange.for_partition(0, 1, DEFAULT_MAX_PARALLELISM),
    )
    started = time.perf_counter()
    for _ in run_task(operator, task, iter([staged])):
        pass
    return time.perf_counter() - started


def measure(keys: int, touched: int, *, columns: bool, folder: Path) -> str:
    """One form's line of the report."""
    backend = HeapBackend(str(folder))
    names = [f"key-{i}" for i in range(keys)]
    first = _batch(_operator(backend, columns=columns), 0, names, START_MS)
    rng = np.random.default_rng(1)
    sparse = []
    for batch in range(1, 6):
        picked = [names[i] for i in rng.choice(keys, touched, replace=False)]
        sparse.append(_batch(_operator(backend, columns=columns), batch, picked, START_MS + batch))
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    form = "columns" if columns else "per key"
    return (
        f"{form:8}: first batch ({keys:,} keys) {first:.2f} s; batches of {touched:,} keys: "
        f"median {statistics.median(sparse) * 1000:.0f} ms; state folder {size / 1e6:.1f} MB"
    )


def main(argv: list[str]) -> int:
    keys = int(argv[0]) if argv else 1_000_000
    touched = int(argv[1]) if len(argv) > 1 else 1_000
    with tempfile.TemporaryDirectory(prefix="firesteel-window-forms-") as scratch:
        for columns in (True, False):
            line = measure(keys, touched, columns=columns, folder=Path(scratch) / str(columns))
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
