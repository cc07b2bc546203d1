"""Event-time windows in plain Python, and the windows crash path's input, job and check.

:class:`WindowReference` is what a window operator must emit for batches of records,
written from the semantics in ``docs/state/windows.md``, not from firesteel's code: the
watermark of batch N is the largest event time of batches before N minus the bound minus
1 ms; a window ``[start, end)`` is due once the watermark reaches ``end - 1`` and expired
once it reaches ``end - 1 + lateness``. Per batch: due windows not yet emitted emit, expired
ones are forgotten; then each key's records, in event-time order, join their windows (a
record is late if every window it belongs to is expired); a window a record joined that is
due already emits again. With early results every ``early`` ms of processing time (the
batch's ``now``): a key whose records joined a window not yet due is woken at the next
multiple of ``early`` after ``now``; woken (first thing in a batch whose ``now`` has reached
it), it emits each of its windows not yet due as an early result, and is woken again at the
next multiple while one is left.

The crash path (``scripts/windows_job.py``, the ``windows`` soak path): Parquet files of
``(seq, key, ts)`` -> session windows with late data (:func:`session_counts`), or tumbling
windows dropping late records and combined before the shuffle (:func:`tumbling_counts`)
-> the transactional file sink. :func:`write_window_files` writes its input, a fixed number of
files per batch, so the batches are known without reading the checkpoint;
:func:`check_window_output` reads the output with pyarrow and compares it with the
reference fed the same batches.
"""

from __future__ import annotations

import datetime as dt
import os
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from firesteel.state import BoundedOutOfOrderness, StateBackend, stateful
from firesteel.state.eventtime import LatePolicy
from firesteel.state.windows import (
    AggregateFunction,
    EventTimeSessionWindows,
    TumblingEventTimeWindows,
    WindowAggregate,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

Record = tuple[str, int, int]
"""``(key, event time in epoch ms, seq)``."""

Emitted = tuple[object, ...]
"""``("window", key, start, end, count, seq_sum)``, ``("early", key, start, end, count,
seq_sum)`` or ``("late", key, ts, seq)``."""


@dataclass
class _Window:
    start: int
    end: int
    count: int = 0
    seq_sum: int = 0
    emitted: bool = False


@dataclass
class WindowReference:
    """``kind`` is ``tumbling``, ``sliding`` or ``session`` (``size`` is the gap); epoch ms."""

    kind: str
    size: int
    bound: int
    lateness: int
    slide: int = 0
    early: int = 0
    max_seen: int | None = None
    windows: dict[str, list[_Window]] = field(default_factory=dict)
    woken: dict[str, int] = field(default_factory=dict)
    """With ``early``: when each key is woken next (epoch ms of processing time)."""

    def _bounds(self, ts: int) -> list[tuple[int, int]]:
        if self.kind == "tumbling":
            start = ts - ts % self.size
            return [(start, start + self.size)]
        if self.kind == "sliding":
            first = ts - ts % self.slide
            return [(s, s + self.size) for s in range(first, ts - self.size, -self.slide)]
        return [(ts, ts + self.size)]

    def batch(self, records: Iterable[Record], now: int = 0) -> list[Emitted]:
        """Feed one batch of records, at processing time ``now`` (epoch ms): its output."""
        records = list(records)
        mark = None if self.max_seen is None else self.max_seen - self.bound - 1
        out: list[Emitted] = []

        def pending(window: _Window) -> bool:
            return mark is None or window.end - 1 > mark

        for key, kept in self.windows.items():
            if self.early and self.woken.get(key, now + 1) <= now:
                del self.woken[key]
                for w in sorted((w for w in kept if pending(w)), key=lambda w: w.start):
                    out.append(("early", key, w.start, w.end, w.count, w.seq_sum))
                    self.woken[key] = now - now % self.early + self.early
        for key, kept in self.windows.items():
            for w in kept:
                if mark is not None and w.end - 1 <= mark and not w.emitted:
                    w.emitted = True
                    out.append(("window", key, w.start, w.end, w.count, w.seq_sum))
            kept[:] = [w for w in kept if mark is None or w.end - 1 + self.lateness > mark]

        def expired(end: int) -> bool:
            return mark is not None and end - 1 + self.lateness <= mark

        for key in sorted({k for k, _, _ in records}):
            kept = self.windows.setdefault(key, [])
            updated: list[_Window] = []
            for ts, seq in sorted((t, s) for k, t, s in records if k == key):
                used = False
                for start, end in self._bounds(ts):
                    if self.kind == "session":
                        near = [w for w in kept if w.start <= end and w.end >= start]
                        if not near and expired(end):
                            continue
                        window = _Window(
                            min([start, *(w.start for w in near)]),
                            max([end, *(w.end for w in near)]),
                            sum(w.count for w in near),
                            sum(w.seq_sum for w in near),
                        )
                        kept[:] = [w for w in kept if all(w is not n for n in near)]
                        updated = [w for w in updated if all(w is not n for n in near)]
                        kept.append(window)
                    else:
                        if expired(end):
                            continue
                        found = [w for w in kept if w.start == start]
                        window = found[0] if found else _Window(start, end)
                        if not found:
                            kept.append(window)
                    window.count += 1
                    window.seq_sum += seq
                    if all(window is not u for u in updated):
                        updated.append(window)
                    used = True
                if not used:
                    out.append(("late", key, ts, seq))
            for w in updated:
                w.emitted = mark is not None and w.end - 1 <= mark
                if w.emitted:
                    out.append(("window", key, w.start, w.end, w.count, w.seq_sum))
            if self.early and any(pending(w) for w in updated):
                self.woken.setdefault(key, now - now % self.early + self.early)
        latest = max((t for _, t, _ in records), default=None)
        if latest is not None and (self.max_seen is None or latest > self.max_seen):
            self.max_seen = latest
        return out


# -- the crash path ----------------------------------------------------------------------------

GAP_MS = 3_000
TUMBLE_MS = 5_000
BOUND_MS = 2_000
LATENESS_MS = 4_000
ORIGIN_MS = 1_800_000_000_000
KEYS = 5
ROWS_PER_FILE = 12
OPERATOR = "sessions"


@dataclass(frozen=True)
class CountAndSum(AggregateFunction):
    """A window's record count and the sum of its records' column ``of``: a record lost or
    added twice changes the sum even where the count could hide it."""

    of: str = "seq"

    def create_accumulator(self) -> list[int]:
        return [0, 0]

    def add(self, value: dict[str, Any], accumulator: list[int]) -> list[int]:
        return [accumulator[0] + 1, accumulator[1] + value[self.of]]

    def get_result(self, accumulator: list[int]) -> Mapping[str, Any]:
        return {"count": accumulator[0], "seq_sum": accumulator[1]}

    def merge(self, a: list[int], b: list[int]) -> list[int]:
        return [a[0] + b[0], a[1] + b[1]]


@dataclass(frozen=True)
class ArrowCountAndSum(CountAndSum):
    """:class:`CountAndSum` with an Arrow form, so a window operator may combine it before
    the shuffle."""

    def arrow_aggregations(self) -> Sequence[tuple[Any, ...]]:
        return [([], "count_all"), (self.of, "sum")]

    def from_arrow(self, values: Sequence[Any]) -> list[int]:
        return [int(values[0]), int(values[1] or 0)]


OUTPUT_SCHEMA = "key string, window_start timestamp, window_end timestamp, count long, seq_sum long"


def session_counts(
    records: DataFrame,
    backend: StateBackend,
    parallelism: int,
    input_partitions: int,
    *,
    per_key: bool = False,
) -> DataFrame:
    """Session windows (gap :data:`GAP_MS`) per key of ``records`` ``(seq, key, ts)``, with
    allowed lateness :data:`LATENESS_MS`; late records in the result's ``__late`` column.
    ``input_partitions`` > 0 repartitions the input first (a restart may change it). The
    aggregate has an Arrow form, so the windows run on columns
    (:mod:`firesteel.state.window_table`); ``per_key``: the same aggregate without it, so
    they run per key (map state and event-time timers)."""
    aggregate = CountAndSum() if per_key else ArrowCountAndSum()
    processor = WindowAggregate(
        EventTimeSessionWindows(GAP_MS * _MS), aggregate, allowed_lateness=LATENESS_MS * _MS
    )
    return _windowed(records, processor, backend, parallelism, input_partitions, late="side-output")


def tumbling_counts(
    records: DataFrame, backend: StateBackend, parallelism: int, input_partitions: int
) -> DataFrame:
    """Tumbling windows (:data:`TUMBLE_MS`) per key of ``records``, allowed lateness
    :data:`LATENESS_MS`, late records dropped (``late="drop"``), so each input task combines
    its records per key and window before the shuffle (``firesteel.state.combine``)."""
    processor = WindowAggregate(
        TumblingEventTimeWindows(TUMBLE_MS * _MS),
        ArrowCountAndSum(),
        allowed_lateness=LATENESS_MS * _MS,
    )
    return _windowed(records, processor, backend, parallelism, input_partitions, late="drop")


_MS = dt.timedelta(milliseconds=1)


def _windowed(
    records: DataFrame,
    processor: WindowAggregate,
    backend: StateBackend,
    parallelism: int,
    input_partitions: int,
    *,
    late: LatePolicy,
) -> DataFrame:
    if input_partitions > 0:
        records = records.repartition(input_partitions)
    return stateful(
        records,
        key="key",
        processor=processor,
        output_schema=OUTPUT_SCHEMA,
        backend=backend,
        name=OPERATOR,
        parallelism=parallelism,
        max_parallelism=16,
        event_time="ts",
        watermark=BoundedOutOfOrderness(BOUND_MS * _MS),
        late=late,
    )


def window_file_records(index: int, rng: random.Random) -> list[Record]:
    """File ``index``'s records: event time moves 2.5 s a file, records within 1.5 s of it;
    a fifth are stragglers 4-14 s behind (late, within the allowed lateness of a session
    already emitted, or beyond it), and each key is quiet for three files in nine, so its
    sessions close."""
    out = []
    for row in range(ROWS_PER_FILE):
        key = f"k{rng.randrange(KEYS)}"
        now = ORIGIN_MS + index * 2_500
        if rng.random() < 0.2:
            ts = now - rng.randint(4_000, 14_000)
        elif (index // 3 + int(key[1:])) % 3 == 0:
            continue
        else:
            ts = now + rng.randint(-1_500, 1_000)
        out.append((key, ts, index * ROWS_PER_FILE + row))
    return out


def write_window_files(folder: Path, first: int, count: int, seed: int = 0) -> None:
    """Write files ``first`` .. ``first + count - 1`` of the input, named and stamped so the
    file source lists them in order (it orders by modification time, then name)."""
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(first, first + count):
        records = window_file_records(index, random.Random(seed * 1_000_003 + index))
        table = pa.table(
            {
                "seq": pa.array([s for _, _, s in records], pa.int64()),
                "key": [k for k, _, _ in records],
                "ts": pa.array([t * 1000 for _, t, _ in records], pa.timestamp("us", tz="UTC")),
            }
        )
        target = folder / f"part-{index:07d}.parquet"
        pq.write_table(table, folder / f".{target.name}")
        stamp = 1_000_000_000 + index
        os.utime(folder / f".{target.name}", (stamp, stamp))
        os.replace(folder / f".{target.name}", target)


def expected_windows(
    files: int, files_per_batch: int, seed: int = 0, operator: str = "sessions"
) -> Counter[Emitted]:
    """What the path must emit over ``files`` files read ``files_per_batch`` to a batch
    (``operator``: ``sessions`` or ``sessions-per-key``, :func:`session_counts`, or
    ``tumbling``, :func:`tumbling_counts`); the late records are those it must send to its
    side output, or drop."""
    if operator.startswith("sessions"):
        reference = WindowReference("session", GAP_MS, BOUND_MS, LATENESS_MS)
    else:
        reference = WindowReference("tumbling", TUMBLE_MS, BOUND_MS, LATENESS_MS)
    total: Counter[Emitted] = Counter()
    for first in range(0, files, files_per_batch):
        batch = [
            record
            for index in range(first, min(first + files_per_batch, files))
            for record in window_file_records(index, random.Random(seed * 1_000_003 + index))
        ]
        total.update(reference.batch(batch))
    return total


def _ms(stamp: dt.datetime) -> int:
    return round(stamp.timestamp() * 1000)


def read_window_output(out: str | Path) -> Counter[Emitted]:
    """The path's output, read with pyarrow's dataset reader (``_``-folders skipped)."""
    rows = ds.dataset(str(out), format="parquet").to_table().to_pylist()
    found: Counter[Emitted] = Counter()
    for row in rows:
        late = row.get("__late")
        if late is not None:
            found[("late", late["key"], _ms(late["ts"]), late["seq"])] += 1
        else:
            found[
                (
                    "window",
                    row["key"],
                    _ms(row["window_start"]),
                    _ms(row["window_end"]),
                    row["count"],
                    row["seq_sum"],
                )
            ] += 1
    return found


def check_window_output(
    out: str | Path, files: int, files_per_batch: int, seed: int = 0, operator: str = "sessions"
) -> dict[str, int]:
    """Counts of what the output got wrong against the reference: ``missing`` (expected
    results or late records not there), ``duplicated`` (there more often than expected),
    ``unexpected`` (never expected); also ``results``, ``re_emitted`` and ``late`` (the
    late records, which the ``tumbling`` operator must drop: expected in its output none)."""
    reference = expected_windows(files, files_per_batch, seed, operator)
    expected = reference
    if operator == "tumbling":
        expected = Counter({e: c for e, c in reference.items() if e[0] != "late"})
    found = read_window_output(out)
    windows = Counter(e[1:4] for e in expected.elements() if e[0] == "window")
    return {
        "results": sum(c for e, c in expected.items() if e[0] == "window"),
        "re_emitted": sum(c - 1 for c in windows.values()),
        "late": sum(c for e, c in reference.items() if e[0] == "late"),
        "missing": sum((expected - found).values()),
        "duplicated": sum((found - expected)[e] for e in expected),
        "unexpected": sum(c for e, c in found.items() if e not in expected),
    }


def records_of(batches: Sequence[Sequence[tuple[str, int]]]) -> list[list[Record]]:
    """Batches of ``(key, ts)`` numbered into :data:`Record` triples (seq = position)."""
    out, seq = [], 0
    for batch in batches:
        out.append([(k, t, seq + i) for i, (k, t) in enumerate(batch)])
        seq += len(batch)
    return out
