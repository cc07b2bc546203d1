"""The interval join's crash path: its two inputs, the job's operator and the check, with
the join computed in plain Python.

Two folders of Parquet files, ``left`` and ``right``, rows ``(seq, key, ts)``, read
:data:`FILES_PER_BATCH` files of each to a batch (``scripts/join_job.py``, the ``join``
soak path) -> ``IntervalJoin(lower, upper)`` per key -> the transactional file sink. Event
time moves 2 s a file and a record is at most 3.5 s behind its file's time, so with the
5 s bound no record is ever late: every pair the interval holds must be in the output
exactly once, whatever the batches, kills and parallelism were (a left record waits in
state until the watermark passes ``ts + upper``, a right one until it passes ``ts -
lower``, and nothing arrives behind the watermark). :func:`expected_pairs` joins the input
files by the interval's definition, not by firesteel's code; :func:`check_join_output`
reads the output with pyarrow's dataset reader.
"""

from __future__ import annotations

import datetime as dt
import os
import random
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from firesteel.state import BoundedOutOfOrderness, StateBackend, stateful
from firesteel.state.joins import IntervalJoin

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

LOWER_MS = -2_000
UPPER_MS = 3_000
BOUND_MS = 5_000
ORIGIN_MS = 1_800_000_000_000
KEYS = 4
ROWS_PER_FILE = 10
FILES_PER_BATCH = 2
OPERATOR = "join"
RIGHT_SEQ = 1_000_000_000
"""The right input's sequence numbers start here, so a pair's two numbers never clash."""
OUTPUT_SCHEMA = "seq long, key string, ts timestamp, right_seq long, right_ts timestamp"

Record = tuple[int, str, int]
"""``(seq, key, event time in epoch ms)``."""
Pair = tuple[int, str, int, int, int]
"""``(left seq, key, left ts, right seq, right ts)``: one output row."""


def interval_join(
    left: DataFrame, right: DataFrame, backend: StateBackend, parallelism: int
) -> DataFrame:
    """Left and right records of a key with ``left.ts + LOWER_MS <= right.ts <= left.ts +
    UPPER_MS``, one row per pair (late records, none here, in ``__late``)."""
    ms = dt.timedelta(milliseconds=1)
    return stateful(
        left,
        key="key",
        processor=IntervalJoin(lower=LOWER_MS * ms, upper=UPPER_MS * ms),
        output_schema=OUTPUT_SCHEMA,
        backend=backend,
        name=OPERATOR,
        parallelism=parallelism,
        max_parallelism=16,
        right=right,
        event_time="ts",
        watermark=BoundedOutOfOrderness(BOUND_MS * ms),
    )


def join_file_records(side: str, index: int) -> list[Record]:
    """File ``index`` of input ``side`` (``left`` or ``right``): its records, event time 2 s
    a file, each record 3.5 s behind to 1 s ahead of it."""
    rng = random.Random(f"{side}-{index}")
    first = index * ROWS_PER_FILE + (RIGHT_SEQ if side == "right" else 0)
    now = ORIGIN_MS + index * 2_000
    return [
        (first + row, f"k{rng.randrange(KEYS)}", now + rng.randint(-3_500, 1_000))
        for row in range(ROWS_PER_FILE)
    ]


def write_join_files(root: Path, first: int, count: int) -> None:
    """Files ``first`` .. ``first + count - 1`` of both inputs, under ``root/left`` and
    ``root/right``, stamped so the file source lists them in order."""
    for side in ("left", "right"):
        folder = root / side
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(first, first + count):
            records = join_file_records(side, index)
            table = pa.table(
                {
                    "seq": pa.array([s for s, _, _ in records], pa.int64()),
                    "key": [k for _, k, _ in records],
                    "ts": pa.array([t * 1000 for _, _, t in records], pa.timestamp("us", tz="UTC")),
                }
            )
            target = folder / f"part-{index:07d}.parquet"
            hidden = folder / f".{target.name}"
            pq.write_table(table, hidden)
            stamp = 1_000_000_000 + index
            os.utime(hidden, (stamp, stamp))
            os.replace(hidden, target)


def expected_pairs(files: int) -> Counter[Pair]:
    """Every pair of the first ``files`` files of each input that the interval holds, once."""
    left = [r for i in range(files) for r in join_file_records("left", i)]
    right = [r for i in range(files) for r in join_file_records("right", i)]
    return Counter(
        (a_seq, key, a_ts, b_seq, b_ts)
        for a_seq, key, a_ts in left
        for b_seq, b_key, b_ts in right
        if b_key == key and a_ts + LOWER_MS <= b_ts <= a_ts + UPPER_MS
    )


def _ms(stamp: dt.datetime) -> int:
    return round(stamp.timestamp() * 1000)


def read_join_output(out: str | Path) -> tuple[Counter[Pair], int]:
    """The output's pairs and its late rows, read with pyarrow's dataset reader."""
    rows = ds.dataset(str(out), format="parquet").to_table().to_pylist()
    pairs: Counter[Pair] = Counter()
    late = 0
    for row in rows:
        if row.get("__late") is not None:
            late += 1
            continue
        pairs[(row["seq"], row["key"], _ms(row["ts"]), row["right_seq"], _ms(row["right_ts"]))] += 1
    return pairs, late


def check_join_output(out: str | Path, files: int) -> dict[str, int]:
    """What the output got wrong against the reference: ``missing`` pairs, ``duplicated``
    ones (beyond once), ``unexpected`` ones (never in the interval) and ``late`` rows (none
    can be); also ``pairs``, how many the reference holds."""
    expected = expected_pairs(files)
    found, late = read_join_output(out)
    return {
        "pairs": len(expected),
        "missing": sum((expected - found).values()),
        "duplicated": sum((found - expected)[p] for p in expected),
        "unexpected": sum(c for p, c in found.items() if p not in expected),
        "late": late,
    }
