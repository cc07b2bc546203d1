"""Event time in the stateful operator: the watermark of a batch, event-time timers, late records.

The watermark ``W(N)`` of batch N is ``M(N-1) - bound - 1 ms``, where ``M(N-1)`` is the
largest event time of the whole input in batches up to N-1 (Flink's
``forBoundedOutOfOrderness``), and there is none before the first event. Every input
task appends one tick row carrying the largest event time it read; the operator copies
each tick to every partition, so every partition sees the same ``M`` of the batch and
records the running maximum in each key group it owns (a reserved value state under the
empty key, as :mod:`firesteel.state.clock` keeps the batch clock). A re-run of N
restores the state of N-1, hence the same ``W(N)``, in every partition, also after a
rescale (each key group carries the maximum).

``M`` is the maximum over the whole input, as Spark's ``withWatermark`` computes it, not
the minimum over source partitions as a Flink source does: an idle source partition
never holds the watermark back (no idleness timeout is needed), and a partition far
behind the others has its records late.

A record is late when its event time is at or behind ``W(N)``; a record without event
time (null) is never late and does not move the watermark.

Event-time timers of a key group are kept in one reserved value state under the empty
key (``[[timestamp, [key, ...]], ...]``), loaded once per task and written back before
the snapshot: they move with their key group through restarts and rescales.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from firesteel.core.spi import ConfigError
from firesteel.state.api import ValueState
from firesteel.state.backend import Key, KeyedStateStore
from firesteel.state.clock import CLOCK_KEY
from firesteel.state.descriptors import reserved_value_state
from firesteel.state.keygroups import KeyGroupRange

if TYPE_CHECKING:
    from firesteel.state.combine import Combiner

TICK_COLUMN = "__firesteel_event_time_tick"
"""The input column of tick rows: the largest event time (epoch ms) an input task read."""

FIRST_ROW_COLUMN = "__firesteel_first_row"
"""The input column :class:`EventTimeTicks` sets true on an input task's first row, which the
operator copies to every partition with the batch's time (so no second Python pass is
needed to find that row)."""

COMBINED_COLUMN = "__firesteel_combined__"
"""With a map-side combine (:mod:`firesteel.state.combine`): the input column holding how many
records a combined row stands for (a dropped late row counts as that many)."""

LATE_COLUMN = "__late"
"""With ``late="side-output"``: the result's column holding a late record (a struct of the
input's columns), null on main-output rows. With ``late="process"``: the boolean column
``process`` finds in ``rows``, true on late records."""

MAX_EVENT_TIME = reserved_value_state("__firesteel_max_event_time__", int)
"""Per key group: the largest event time of the input in the batches committed so far."""

EVENT_TIMERS = reserved_value_state("__firesteel_event_timers__", list)
"""Per key group: its keys' event-time timers, ``[[timestamp, [key, ...]], ...]``."""

LATE_DROPPED = reserved_value_state("__firesteel_late_dropped__", int)
"""Per key group: how many late records of its keys ``late="drop"`` dropped, in committed
batches (a re-run of a batch does not count them twice), shown by
:func:`~firesteel.backends.inspect.read_state` and ``firesteel state --all``."""

LatePolicy = Literal["side-output", "drop", "process"]
"""What happens to a late record: ``side-output`` (default) emits it in the result's
:data:`LATE_COLUMN`; ``drop`` drops it and counts it in :data:`LATE_DROPPED` (and
the task's log); ``process`` hands it to ``process`` with
:data:`LATE_COLUMN` true."""

LATE_POLICIES: tuple[LatePolicy, ...] = ("side-output", "drop", "process")


class TimeDomain(str, enum.Enum):
    """Which clock a firing timer belongs to (``state.time_domain`` inside ``on_timer``)."""

    PROCESSING_TIME = "processing-time"
    EVENT_TIME = "event-time"


@dataclass(frozen=True)
class BoundedOutOfOrderness:
    """Watermark strategy: events arrive at most ``bound`` behind the latest one seen
    (Flink's ``WatermarkStrategy.forBoundedOutOfOrderness``)."""

    bound: dt.timedelta

    def __post_init__(self) -> None:
        if not isinstance(self.bound, dt.timedelta) or self.bound < dt.timedelta(0):
            msg = f"BoundedOutOfOrderness: bound must be a timedelta >= 0, got {self.bound!r}"
            raise ConfigError(msg)

    def watermark(self, max_event_ms: int) -> int:
        """The watermark once ``max_event_ms`` was seen: ``max - bound - 1 ms``."""
        return max_event_ms - self.bound // dt.timedelta(milliseconds=1) - 1


@dataclass(frozen=True)
class EventTime:
    """The event-time settings of one operator (built by :func:`~firesteel.state.stateful`)."""

    column: str
    strategy: BoundedOutOfOrderness
    late: LatePolicy = "side-output"

    def __post_init__(self) -> None:
        if self.late not in LATE_POLICIES:
            msg = f"stateful(): late={self.late!r}: choose one of {', '.join(LATE_POLICIES)}"
            raise ConfigError(msg)


def epoch_ms(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Epoch milliseconds (floored) of a timestamp column, nulls kept."""
    kind = column.type
    if not pa.types.is_timestamp(kind):
        msg = f"event time must be a timestamp column, got {kind}"
        raise ConfigError(msg)
    per_ms = {"s": 0, "ms": 1, "us": 1000, "ns": 1_000_000}[kind.unit]
    raw = pc.cast(column, pa.int64())
    if per_ms == 0:
        return pc.multiply(raw, 1000)
    if per_ms == 1:
        return raw
    # Floored, not truncated, so an instant before 1970 stays in its millisecond; float64
    # holds epoch microseconds exactly until the year 2255.
    return pc.floor(pc.divide(pc.cast(raw, pa.float64()), per_ms)).cast(pa.int64())


def event_millis(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's event time of a timestamp column as epoch milliseconds (0 where null), and
    whether the row has one."""
    times = epoch_ms(column)
    present = np.asarray(pc.is_valid(times).to_numpy(zero_copy_only=False), dtype=bool)
    millis = np.asarray(pc.fill_null(times, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
    return millis, present


@dataclass
class EventTimeTicks:
    """The picklable ``mapInArrow`` function before the operator's shuffle: passes every
    row through with :data:`TICK_COLUMN` null and :data:`FIRST_ROW_COLUMN` true on the
    task's first row only, and appends, after an input task's last row, one tick row (all
    columns null but :data:`TICK_COLUMN`, and :data:`FIRST_ROW_COLUMN` false) with the
    largest event time the task read.

    With ``combine``, the rows passed through are the task's records combined per key and
    window pane (:mod:`firesteel.state.combine`): the whole task's input is read first."""

    column: str
    combine: Combiner | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        latest: int | None = None
        if self.combine is not None:
            collected = [b for b in batches if b.num_rows]
            if not collected:
                return
            rows = pa.Table.from_batches(collected)
            # The tick is the largest event time read: the combined rows carry pane starts.
            latest = _largest_ms(rows.column(self.column))
            batches = iter(self.combine.combine(rows).to_batches())
        schema: pa.Schema | None = None
        first = True
        for batch in batches:
            # Every column nullable, as the tick row needs (an input column may be declared
            # non-nullable, a literal for one): all batches of the task share one schema.
            schema = pa.schema(
                [
                    *(f.with_nullable(True) for f in batch.schema),
                    pa.field(TICK_COLUMN, pa.int64()),
                    pa.field(FIRST_ROW_COLUMN, pa.bool_()),
                ]
            )
            flags = np.zeros(batch.num_rows, dtype=bool)
            if batch.num_rows:
                if self.combine is None:
                    found = _largest_ms(batch.column(self.column))
                    if found is not None and (latest is None or found > latest):
                        latest = found
                flags[0], first = first, False
            ticks = pa.nulls(batch.num_rows, pa.int64())
            yield pa.RecordBatch.from_arrays(
                [*batch.columns, ticks, pa.array(flags, pa.bool_())], schema=schema
            )
        if latest is None or schema is None:
            return
        columns = [pa.nulls(1, f.type) for f in schema][:-2]
        tick = [pa.array([latest], pa.int64()), pa.array([False], pa.bool_())]
        yield pa.RecordBatch.from_arrays([*columns, *tick], schema=schema)


def _largest_ms(column: pa.Array | pa.ChunkedArray) -> int | None:
    """The largest instant of ``column`` as epoch milliseconds (None when all are null):
    the largest instant first, then its millisecond, since flooring keeps the order."""
    stamp = pc.max(column)
    found: int | None = epoch_ms(pa.array([stamp.value], pa.int64()).cast(stamp.type))[0].as_py()
    return found


def batch_max_event_time(received: pa.Table | None) -> int | None:
    """The largest event time of the whole batch: the maximum of the ticks a task got."""
    if received is None or TICK_COLUMN not in received.column_names:
        return None
    found = pc.max(received.column(TICK_COLUMN)).as_py()
    return None if found is None else int(found)


def advance(
    store: KeyedStateStore,
    key_groups: KeyGroupRange,
    strategy: BoundedOutOfOrderness,
    batch_max: int | None,
) -> int | None:
    """The watermark of this batch (None before any event), from the maximum the key
    groups recorded in earlier batches; then records ``batch_max`` in each key group."""
    recorded = cast(ValueState, store.state(MAX_EVENT_TIME))
    seen: int | None = None
    for key_group in key_groups:
        store.set_current_key(CLOCK_KEY, key_group)
        stored = recorded.value()
        if stored is not None and (seen is None or stored > seen):
            seen = int(stored)
    watermark = None if seen is None else strategy.watermark(seen)
    if batch_max is not None and (seen is None or batch_max > seen):
        for key_group in key_groups:
            store.set_current_key(CLOCK_KEY, key_group)
            recorded.update(batch_max)
    return watermark


class EventTimers:
    """The event-time timers of a task's key groups, in memory while the task runs.

    A timestamp's keys stay as stored (a list, sorted as saved) until a timer of that
    timestamp is added or removed, so a batch pays for the timestamps it touches."""

    def __init__(self, store: KeyedStateStore, key_groups: KeyGroupRange) -> None:
        self._store = store
        self._key_groups = key_groups
        self._state = cast(ValueState, store.state(EVENT_TIMERS))
        self._by_group: dict[int, dict[int, set[Key] | list[Any]]] = {}
        for key_group in key_groups:
            store.set_current_key(CLOCK_KEY, key_group)
            stored = self._state.value() or []
            self._by_group[key_group] = {int(timestamp): keys for timestamp, keys in stored}
        self._changed: set[int] = set()

    def _keys(self, key_group: int, timestamp_ms: int) -> set[Key] | None:
        """The keys with a timer at ``timestamp_ms``, as a set one may change."""
        timers = self._by_group[key_group]
        keys = timers.get(timestamp_ms)
        if keys is None or type(keys) is set:
            return keys
        loaded = {tuple(k) for k in keys}
        timers[timestamp_ms] = loaded
        return loaded

    def register(self, key_group: int, key: Key, timestamp_ms: int) -> None:
        """Add a timer (idempotent per key and timestamp)."""
        keys = self._keys(key_group, timestamp_ms)
        if keys is None:
            self._by_group[key_group][timestamp_ms] = {key}
        elif key in keys:
            return
        else:
            keys.add(key)
        self._changed.add(key_group)

    def delete(self, key_group: int, key: Key, timestamp_ms: int) -> None:
        """Remove a timer (no error when absent)."""
        keys = self._keys(key_group, timestamp_ms)
        if keys is None or key not in keys:
            return
        keys.discard(key)
        if not keys:
            del self._by_group[key_group][timestamp_ms]
        self._changed.add(key_group)

    def of_key(self, key_group: int, key: Key) -> list[int]:
        """A key's pending timers, ascending."""
        return sorted(
            t for t in list(self._by_group[key_group]) if key in (self._keys(key_group, t) or ())
        )

    def pending(self) -> bool:
        """Whether any key group of the task has a timer."""
        return any(self._by_group.values())

    def pop_due(self, watermark: int) -> list[tuple[int, int, Key]]:
        """Remove and return ``(timestamp, key_group, key)`` of every timer at or behind
        ``watermark``, in timestamp order (then key group, then key as registered)."""
        due: list[tuple[int, int, Key]] = []
        for key_group, timers in self._by_group.items():
            for timestamp in [t for t in timers if t <= watermark]:
                keys = timers.pop(timestamp)
                ordered = [tuple(k) for k in keys] if type(keys) is list else sorted(keys, key=repr)
                due.extend((timestamp, key_group, key) for key in ordered)
                self._changed.add(key_group)
        due.sort(key=lambda item: (item[0], item[1]))
        return due

    def save(self) -> None:
        """Write the changed key groups' timers to state (before the snapshot)."""
        for key_group in sorted(self._changed):
            self._store.set_current_key(CLOCK_KEY, key_group)
            timers = self._by_group[key_group]
            self._state.update([[t, _stored(timers[t])] for t in sorted(timers)] or None)
        self._changed.clear()


def _stored(keys: set[Key] | list[Any]) -> list[Any]:
    """A timestamp's keys as saved: lists, sorted by their tuples' ``repr``."""
    if type(keys) is list:
        return keys
    if len(keys) == 1:  # the common case of session windows: one key per end
        return [list(next(iter(keys)))]
    return [list(k) for k in sorted(keys, key=repr)]


def count_dropped(store: KeyedStateStore, late: pa.Table, key_group_column: str) -> None:
    """Add the ``late`` records to :data:`LATE_DROPPED` of their key groups (a combined row
    as the records it stands for)."""
    counter = cast(ValueState, store.state(LATE_DROPPED))
    if COMBINED_COLUMN in late.column_names:
        sums = late.group_by(key_group_column, use_threads=False).aggregate(
            [(COMBINED_COLUMN, "sum")]
        )
        groups = sums.column(key_group_column).to_pylist()
        counts = sums.column(f"{COMBINED_COLUMN}_sum").to_pylist()
    else:
        found = pc.value_counts(late.column(key_group_column).combine_chunks())
        groups = found.field("values").to_pylist()
        counts = found.field("counts").to_pylist()
    for key_group, count in zip(groups, counts, strict=True):
        store.set_current_key(CLOCK_KEY, key_group)
        counter.update((counter.value() or 0) + count)


def count_dropped_in(store: KeyedStateStore, key_group: int, count: int) -> None:
    """Add ``count`` dropped late records to :data:`LATE_DROPPED` of ``key_group`` (leaves
    the store's current key on the key group's reserved entry)."""
    counter = cast(ValueState, store.state(LATE_DROPPED))
    store.set_current_key(CLOCK_KEY, key_group)
    counter.update((counter.value() or 0) + count)


def late_mask(rows: pa.Table, column: str, watermark: int | None) -> pa.Array | None:
    """True on rows whose event time is at or behind ``watermark``; None when none is."""
    if watermark is None:
        return None
    times = epoch_ms(rows.column(column))
    mask = pc.fill_null(pc.less_equal(times, watermark), False)
    return mask if pc.any(mask).as_py() else None


def side_output_batch(late: pa.Table, schema: pa.Schema, late_type: pa.DataType) -> pa.RecordBatch:
    """Result rows carrying ``late`` records in :data:`LATE_COLUMN`, main columns null."""
    rows = late.num_rows
    struct = pa.StructArray.from_arrays(
        [late.column(f.name).combine_chunks().cast(f.type) for f in late_type],
        fields=list(late_type),
    )
    return pa.RecordBatch.from_arrays(
        [*(pa.nulls(rows, f.type) for f in schema), struct],
        names=[*schema.names, LATE_COLUMN],
    )


def with_empty_late(batch: pa.RecordBatch, late_type: pa.DataType) -> pa.RecordBatch:
    """A main-output batch with a null :data:`LATE_COLUMN`."""
    return batch.append_column(LATE_COLUMN, pa.nulls(batch.num_rows, late_type))


def main_output(df: Any) -> Any:
    """The main output of a ``stateful(..., late="side-output")`` result (or of a batch of it
    inside ``foreachBatch``): its rows without a late record, without :data:`LATE_COLUMN`."""
    from pyspark.sql import functions as F

    return df.where(F.col(LATE_COLUMN).isNull()).drop(LATE_COLUMN)


def late_output(df: Any) -> Any:
    """The side output of late records of a ``stateful(..., late="side-output")`` result:
    the late input records, with the input's columns."""
    from pyspark.sql import functions as F

    return df.where(F.col(LATE_COLUMN).isNotNull()).select(f"{LATE_COLUMN}.*")
