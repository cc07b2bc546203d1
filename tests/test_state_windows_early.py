"""Early window results on processing time (``WindowAggregate(..., early_every=...)``): at the
operator task level against the plain-Python reference (``WindowReference(early=...)``) fed
the same batches at the same processing times, across a rescale; and in a real query, whose
early results come before the window's final result, which comes exactly once.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark import cloudpickle
from test_state_backends import BACKENDS, make_backend
from test_state_windows import (
    ASSIGNERS,
    LATENESS_MS,
    MS,
    OUTPUT,
    observed,
    out_of_order,
    run_batch,
)
from test_state_windows_panes import job

from firesteel.backends import FilesystemBackend
from firesteel.core.errors import ConfigError
from firesteel.state import BoundedOutOfOrderness, stateful
from firesteel.state.windows import (
    IS_FINAL,
    Count,
    TumblingEventTimeWindows,
    WindowAggregate,
)
from firesteel.testing.windows import CountAndSum, WindowReference

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EARLY_MS = 2
"""The batches of :func:`run_batch` are 1 ms of processing time apart: early results fire
every other batch."""
SCHEMA = OUTPUT.append(pa.field(IS_FINAL, pa.bool_()))


@pytest.mark.parametrize(("kind", "backend_kind"), list(zip(ASSIGNERS, BACKENDS, strict=True)))
def test_early_results_match_the_reference_across_a_rescale(
    tmp_path: Path, kind: str, backend_kind: str
) -> None:
    assigner, sizes = ASSIGNERS[kind]
    reference = WindowReference(kind, bound=2_000, lateness=LATENESS_MS, early=EARLY_MS, **sizes)
    backend = make_backend(backend_kind, tmp_path)
    outputs: Counter[tuple[Any, ...]] = Counter()
    for n, records in enumerate(out_of_order(seed=23)):
        processor = WindowAggregate(
            assigner,
            CountAndSum("v"),
            allowed_lateness=LATENESS_MS * MS,
            early_every=EARLY_MS * MS,
        )
        rows = run_batch(job(backend, processor, 3 if n < 5 else 2, SCHEMA), n, records)
        # run_batch's batch n runs at processing time 1000 + n ms.
        expected = Counter(reference.batch(records, now=1_000 + n))
        assert observed(rows) == expected, f"batch {n}"
        outputs.update(expected)
    assert {e[0] for e in outputs} == {"early", "window", "late"}


def test_early_every_is_checked() -> None:
    with pytest.raises(ConfigError, match="early_every must be at least 1 ms"):
        WindowAggregate(TumblingEventTimeWindows(MS), Count(), early_every=dt.timedelta(0))


def _write(folder: Path, index: int, records: list[tuple[str, int]]) -> None:
    table = pa.table(
        {
            "k": [k for k, _ in records],
            "ts": pa.array([t * 1000 for _, t in records], pa.timestamp("us", tz="UTC")),
        }
    )
    path = folder / f"part-{index:03d}.parquet"
    pq.write_table(table, path)
    os.utime(path, (1_000_000 + index, 1_000_000 + index))


def test_a_query_sees_early_results_then_the_final_one_exactly_once(
    spark: Any, tmp_path: Path
) -> None:
    source = tmp_path / "in"
    source.mkdir()
    files = [[("a", 1_000), ("a", 2_000)], [("a", 3_000)], [("a", 4_000)], [("b", 20_000)]]
    files.append([("b", 21_000)])
    for index, records in enumerate(files):
        _write(source, index, records)
    events = spark.readStream.schema("k string, ts timestamp").option("maxFilesPerTrigger", 1)
    windows = stateful(
        events.parquet(str(source)),
        key="k",
        processor=WindowAggregate(
            TumblingEventTimeWindows(dt.timedelta(seconds=10)),
            Count(),
            early_every=dt.timedelta(milliseconds=1),
        ),
        output_schema="k string, window_start timestamp, window_end timestamp, count long, "
        "is_final boolean",
        backend=FilesystemBackend(str(tmp_path / "state")),
        event_time="ts",
        watermark=BoundedOutOfOrderness(dt.timedelta(seconds=1)),
        late="drop",
    )
    seen: list[tuple[int, str, int, bool]] = []

    def collect(batch: Any, batch_id: int) -> None:
        for row in batch.collect():
            seen.append((batch_id, row["k"], row["count"], row["is_final"]))

    query = (
        windows.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    # Batch n runs after file n: a's window [0 s, 10 s) is due once b's 20 s is seen.
    assert sorted(r for r in seen if r[1] == "a") == [
        (1, "a", 2, False),
        (2, "a", 3, False),
        (3, "a", 4, False),
        (4, "a", 4, True),
    ]
    assert (4, "b", 1, False) in seen
    assert not any(r[1] == "b" and r[3] for r in seen)
