"""Event-time windows on keyed state: tumbling, sliding and session windows with an aggregate
function and allowed lateness (Flink's ``window(...).allowedLateness(...).aggregate(...)``)::

    from firesteel.state.windows import Count, TumblingEventTimeWindows, WindowAggregate

    counts = stateful(
        events, key="sensor",
        processor=WindowAggregate(TumblingEventTimeWindows(timedelta(minutes=1)), Count(),
                                  allowed_lateness=timedelta(minutes=5)),
        output_schema="sensor string, window_start timestamp, window_end timestamp, count long",
        backend=backend, event_time="ts", watermark=BoundedOutOfOrderness(timedelta(seconds=10)))

Per key, as Flink's event-time trigger does it (``W`` is the batch's watermark, a window
``[start, end)`` is *due* once ``W >= end - 1`` and *expired* once ``W >= end - 1 +
allowed_lateness``):

* a window's accumulator lives in the key's map state ``windows`` (start -> ``[end,
  accumulator]``), with an event-time timer at ``end - 1`` (emit) and one at ``end - 1 +
  allowed_lateness`` (purge); both travel with the key group (restarts, rescales,
  savepoints, any backend);
* a due window emits its result once, when its timer fires (before the batch's input);
* a record for a window that is due but not expired updates it, and the window emits its
  updated result again in that batch (once per batch, however many records updated it);
* a record whose windows are all expired (for a session: whose own window is expired and
  merges with no window still kept) goes where the operator's ``late`` policy sends late
  records: the side output by default (``late_output``), or dropped and counted;
* a record without event time (null) cannot be placed in a window: it goes there too.

The batch's records are first grouped per key and window, vectorized
(:mod:`firesteel.state.panes`), so each window's state and timers are touched once per
batch. An aggregate with an Arrow form (``arrow_aggregations``: ``Count``, ``Sum``,
``Min``, ``Max``) folds a window's records of the batch in one hash aggregation and merges
that into the window's accumulator; any other adds a key's records of a batch one by one
in event-time order (ties in input order, which a re-run after a shuffle may not keep: make
``add`` commutative for records of equal time). Under ``late="drop"``, tumbling and sliding
windows (size a multiple of the slide) with such an aggregate are folded per key and window
in each input task before the shuffle too (``combine``, :mod:`firesteel.state.combine`).
Windows with such an aggregate whose aggregations merge, and no early results, run on
columns instead (:mod:`firesteel.state.window_table`, unless ``columns=False``): a key
group's windows are one Arrow table in state and no Python runs per key or window.
Session windows merge when they overlap or touch, accumulators through ``merge``. Each
result row holds the key columns, ``window_start`` and ``window_end`` (UTC timestamps) and
the columns ``get_result`` returns.

Early results (``early_every=``, Flink's ``ContinuousProcessingTimeTrigger``): a key that
got records for a window not yet due has a processing-time timer at the next multiple of
``early_every``; when it fires (before the batch's event-time timers and input), each of the
key's windows not yet due emits its current result with ``is_final`` false, and the timer
is set again while such a window is left. A due window's result, and its re-emissions, have
``is_final`` true. The timers are processing-time timers in state: a re-run of a batch
fires the same ones (its processing time is the same). An early result of a session may
name a window that later grows or merges with another.
"""

from __future__ import annotations

import datetime as dt
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from firesteel.core.spi import ConfigError
from firesteel.state.api import MapState
from firesteel.state.backend import Key
from firesteel.state.combine import Combiner, merge_specs, partial_column
from firesteel.state.descriptors import MapStateDescriptor, StateDescriptor
from firesteel.state.eventtime import COMBINED_COLUMN, EventTime, EventTimers, TimeDomain
from firesteel.state.panes import KeyPanes, Pane, key_panes
from firesteel.state.processor import KeyedProcessor, KeyState, OpenContext
from firesteel.state.window_table import END, START, WINDOW_TABLE, WindowTable

_MS = dt.timedelta(milliseconds=1)


def _millis(name: str, value: dt.timedelta, *, positive: bool = True) -> int:
    if not isinstance(value, dt.timedelta) or value < dt.timedelta(0):
        msg = f"{name} must be a timedelta >= 0, got {value!r}"
        raise ConfigError(msg)
    millis = value // _MS
    if positive and millis <= 0:
        msg = f"{name} must be at least 1 ms, got {value!r}"
        raise ConfigError(msg)
    return millis


class WindowAssigner(ABC):
    """Which windows ``[start, end)`` (epoch ms) a record of event time ``ts`` belongs to."""

    merging: ClassVar[bool] = False
    """True for session windows: windows that overlap or touch become one."""

    @abstractmethod
    def assign(self, ts: int) -> list[tuple[int, int]]:
        """The windows of event time ``ts``, oldest first."""

    def assign_all(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The windows of many event times at once: ``(index into ts, start, end)`` arrays,
        one entry per window of each time (by default :meth:`assign` per time)."""
        found = [
            (index, start, end)
            for index, stamp in enumerate(ts.tolist())
            for start, end in self.assign(stamp)
        ]
        index, start, end = zip(*found, strict=True) if found else ((), (), ())
        return (
            np.asarray(index, dtype=np.int64),
            np.asarray(start, dtype=np.int64),
            np.asarray(end, dtype=np.int64),
        )

    def panes(self) -> bool:
        """Whether :meth:`pane_starts` is defined (False by default: no map-side combine)."""
        return False

    def pane_starts(self, ts: np.ndarray) -> np.ndarray:
        """For a map-side combine: each event time's pane, the start of the times that
        share all its windows, which lies in exactly those windows."""
        msg = f"{type(self).__name__} has no panes"
        raise NotImplementedError(msg)


@dataclass(frozen=True)
class TumblingEventTimeWindows(WindowAssigner):
    """Fixed, non-overlapping windows of ``size``, aligned to the epoch plus ``offset``
    (Flink's ``TumblingEventTimeWindows.of(size, offset)``)."""

    size: dt.timedelta
    offset: dt.timedelta = dt.timedelta(0)

    def __post_init__(self) -> None:
        size = _millis("TumblingEventTimeWindows: size", self.size)
        offset = _millis("TumblingEventTimeWindows: offset", self.offset, positive=False)
        object.__setattr__(self, "_size", size)
        object.__setattr__(self, "_offset", offset % size)

    def assign(self, ts: int) -> list[tuple[int, int]]:
        size: int = self._size  # type: ignore[attr-defined]
        start = ts - (ts - self._offset) % size  # type: ignore[attr-defined]
        return [(start, start + size)]

    def assign_all(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        size: int = self._size  # type: ignore[attr-defined]
        start = ts - (ts - self._offset) % size  # type: ignore[attr-defined]
        return np.arange(len(ts), dtype=np.int64), start, start + size

    def panes(self) -> bool:
        return True

    def pane_starts(self, ts: np.ndarray) -> np.ndarray:
        """A record's window is its pane."""
        return self.assign_all(ts)[1]


@dataclass(frozen=True)
class SlidingEventTimeWindows(WindowAssigner):
    """Windows of ``size`` starting every ``slide``, so a record is in ``size / slide`` of
    them (Flink's ``SlidingEventTimeWindows.of(size, slide, offset)``)."""

    size: dt.timedelta
    slide: dt.timedelta
    offset: dt.timedelta = dt.timedelta(0)

    def __post_init__(self) -> None:
        size = _millis("SlidingEventTimeWindows: size", self.size)
        slide = _millis("SlidingEventTimeWindows: slide", self.slide)
        offset = _millis("SlidingEventTimeWindows: offset", self.offset, positive=False)
        if slide > size:
            msg = f"SlidingEventTimeWindows: slide {self.slide} is longer than size {self.size}"
            raise ConfigError(msg)
        object.__setattr__(self, "_size", size)
        object.__setattr__(self, "_slide", slide)
        object.__setattr__(self, "_offset", offset % slide)

    def assign(self, ts: int) -> list[tuple[int, int]]:
        size: int = self._size  # type: ignore[attr-defined]
        slide: int = self._slide  # type: ignore[attr-defined]
        start = ts - (ts - self._offset) % slide  # type: ignore[attr-defined]
        starts = range(start, ts - size, -slide)
        return [(s, s + size) for s in reversed(starts)]

    def assign_all(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        size: int = self._size  # type: ignore[attr-defined]
        slide: int = self._slide  # type: ignore[attr-defined]
        latest = ts - (ts - self._offset) % slide  # type: ignore[attr-defined]
        indices, starts = [], []
        for back in range(-(-size // slide)):
            start = latest - back * slide
            inside = np.flatnonzero(start > ts - size)
            indices.append(inside)
            starts.append(start[inside])
        start = np.concatenate(starts)
        return np.concatenate(indices), start, start + size

    def panes(self) -> bool:
        """Only when ``size`` is a multiple of ``slide`` do the times of one slide share all
        their windows."""
        return self._size % self._slide == 0  # type: ignore[attr-defined]

    def pane_starts(self, ts: np.ndarray) -> np.ndarray:
        """The start of the slide a time is in: the start of its latest window."""
        return ts - (ts - self._offset) % self._slide  # type: ignore[attr-defined]


@dataclass(frozen=True)
class EventTimeSessionWindows(WindowAssigner):
    """A session per key: records closer than ``gap`` to each other share one window,
    ``[first record, last record + gap)`` (Flink's ``EventTimeSessionWindows.withGap``)."""

    gap: dt.timedelta
    merging: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "_gap", _millis("EventTimeSessionWindows: gap", self.gap))

    def assign(self, ts: int) -> list[tuple[int, int]]:
        return [(ts, ts + self._gap)]  # type: ignore[attr-defined]

    def assign_all(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return np.arange(len(ts), dtype=np.int64), ts, ts + self._gap  # type: ignore[attr-defined]


class AggregateFunction(ABC):
    """How a window's records become its result (Flink's ``AggregateFunction``).

    The accumulator is kept in state between batches, so it must be msgpack-able (numbers,
    str, bytes, lists, dicts, datetimes, dataclasses); return a new accumulator or the one
    given, changed.
    """

    @abstractmethod
    def create_accumulator(self) -> Any:
        """A new, empty accumulator."""

    @abstractmethod
    def add(self, value: dict[str, Any], accumulator: Any) -> Any:
        """The accumulator with one record (a dict of the input's columns) added."""

    @abstractmethod
    def get_result(self, accumulator: Any) -> Mapping[str, Any]:
        """The result columns of a window (added to its key and bounds in the output row)."""

    def arrow_result(self, values: Sequence[pa.ChunkedArray]) -> Mapping[str, Any] | None:
        """The result columns of many windows at once, from the columns of their Arrow form's
        values (in the order of :meth:`arrow_aggregations`), or None (the default):
        :meth:`get_result` of :meth:`from_arrow` then runs per window. For functions with an
        Arrow form whose result is a column operation on its values."""
        return None

    def merge(self, a: Any, b: Any) -> Any:
        """One accumulator of two (session windows merging, and the Arrow form's partial
        accumulators); others need not implement it."""
        msg = f"{type(self).__name__} must implement merge(a, b) to aggregate session windows"
        raise NotImplementedError(msg)

    def arrow_aggregations(self) -> Sequence[tuple[Any, ...]] | None:
        """The Arrow form, or None (the default: records are added one by one with
        :meth:`add`). Hash aggregations as ``pyarrow.Table.group_by(...).aggregate`` takes
        them (``(column, "sum")``, ``([], "count_all")``...), whose values over some records
        of one window :meth:`from_arrow` turns into their accumulator, which :meth:`merge`
        combines with the window's: the window operator then folds a batch's records of a
        window in one vectorized pass (no Python per record). A function with an Arrow form
        implements :meth:`merge`."""
        return None

    def from_arrow(self, values: Sequence[Any]) -> Any:
        """The accumulator of some records of one window, from the values (Python objects,
        in the order of :meth:`arrow_aggregations`) of the Arrow form over them."""
        msg = f"{type(self).__name__} must implement from_arrow(values) with arrow_aggregations()"
        raise NotImplementedError(msg)


@dataclass(frozen=True)
class Count(AggregateFunction):
    """The number of records of a window, in the output column ``column``."""

    column: str = "count"

    def create_accumulator(self) -> int:
        return 0

    def add(self, value: dict[str, Any], accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> Mapping[str, Any]:
        return {self.column: accumulator}

    def merge(self, a: int, b: int) -> int:
        return a + b

    def arrow_aggregations(self) -> Sequence[tuple[Any, ...]]:
        return [([], "count_all")]

    def arrow_result(self, values: Sequence[pa.ChunkedArray]) -> Mapping[str, Any]:
        return {self.column: values[0]}

    def from_arrow(self, values: Sequence[Any]) -> int:
        return int(values[0])


@dataclass(frozen=True)
class Sum(AggregateFunction):
    """The sum of the input column ``of`` over a window (nulls skipped), in the output
    column ``column``."""

    of: str
    column: str = "sum"

    def create_accumulator(self) -> float | int:
        return 0

    def add(self, value: dict[str, Any], accumulator: float | int) -> float | int:
        found = value[self.of]
        return accumulator if found is None else accumulator + found

    def get_result(self, accumulator: float | int) -> Mapping[str, Any]:
        return {self.column: accumulator}

    def merge(self, a: float | int, b: float | int) -> float | int:
        return a + b

    def arrow_aggregations(self) -> Sequence[tuple[Any, ...]]:
        return [(self.of, "sum")]

    def arrow_result(self, values: Sequence[pa.ChunkedArray]) -> Mapping[str, Any]:
        return {self.column: pc.fill_null(values[0], 0)}

    def from_arrow(self, values: Sequence[Any]) -> float | int:
        return 0 if values[0] is None else values[0]


@dataclass(frozen=True)
class _Extreme(AggregateFunction):
    """The least or greatest value of the input column ``of`` over a window (nulls
    skipped; null when the window has no value), in the output column ``column``."""

    of: str
    column: str
    _pick: ClassVar[Any] = min
    _arrow: ClassVar[str] = "min"

    def create_accumulator(self) -> Any:
        return None

    def add(self, value: dict[str, Any], accumulator: Any) -> Any:
        return self.merge(accumulator, value[self.of])

    def get_result(self, accumulator: Any) -> Mapping[str, Any]:
        return {self.column: accumulator}

    def merge(self, a: Any, b: Any) -> Any:
        if a is None:
            return b
        return a if b is None else type(self)._pick(a, b)

    def arrow_aggregations(self) -> Sequence[tuple[Any, ...]]:
        return [(self.of, self._arrow)]

    def arrow_result(self, values: Sequence[pa.ChunkedArray]) -> Mapping[str, Any]:
        return {self.column: values[0]}

    def from_arrow(self, values: Sequence[Any]) -> Any:
        return values[0]


@dataclass(frozen=True)
class Min(_Extreme):
    """The least value of the input column ``of`` over a window (nulls skipped; null when
    the window has none), in the output column ``column``."""

    column: str = "min"


@dataclass(frozen=True)
class Max(_Extreme):
    """The greatest value of the input column ``of`` over a window (nulls skipped; null
    when the window has none), in the output column ``column``."""

    column: str = "max"
    _pick: ClassVar[Any] = max
    _arrow: ClassVar[str] = "max"


IS_FINAL = "is_final"
"""With ``early_every``: the result column that is false on early results, true on a
window's result once it is due (and on its re-emissions for allowed-lateness updates)."""

WINDOWS = MapStateDescriptor("windows", list, key_type=int)
"""Per key: window start (epoch ms) -> ``[end, accumulator]``."""


@dataclass
class WindowAggregate(KeyedProcessor):
    """The window operator: ``assigner``'s windows per key, aggregated by ``aggregate``,
    kept ``allowed_lateness`` past their end for late records (see module docs). Run it
    with ``stateful(..., processor=WindowAggregate(...), event_time=..., watermark=...)``.

    ``early_every``: also emit each window's current result every so much processing
    time until it is due (Flink's ``ContinuousProcessingTimeTrigger``); result rows then
    carry a boolean column ``is_final``, false on those early results.

    ``combine``: with ``late="drop"``, tumbling windows or sliding ones whose size is a
    multiple of their slide, and an aggregate whose Arrow form has partials (``Count``,
    ``Sum``, ``Min``, ``Max``), each input task folds its records per key and window before
    the shuffle (:mod:`firesteel.state.combine`, Spark's partial aggregation): the same
    results and dropped count, far fewer rows shuffled. Under ``late="side-output"`` the
    late records must reach the side output as themselves, so no combine is done there;
    ``combine=False`` turns it off everywhere.

    ``columns``: with an aggregate whose Arrow form has partials and no ``early_every``, the
    windows run on columns (:mod:`firesteel.state.window_table`): a key group's open windows
    are one Arrow table in state, and every batch reads, merges and writes back the whole
    table of each key group it touches, in a few vectorized calls. That is far faster when a
    batch touches many of the open windows (the benchmarks' 5M events over 100k keys), and
    writes more when it touches few of many (a million keys with open windows, a second's
    trigger bringing records for a thousand of them: each batch rewrites every key group's
    table, where the per-key form writes the thousand keys' entries: 297 ms against 22 ms a
    batch, ``python -m benchmarks.window_forms``; the column form pays off once a batch
    touches more than about 2-3% of the open windows). ``columns=False`` keeps the per-key
    form (map state and event-time timers). The two forms keep different state:
    an operator cannot switch between them across a restart (refused, saying which form
    wrote its windows).
    """

    assigner: WindowAssigner
    aggregate: AggregateFunction
    allowed_lateness: dt.timedelta = dt.timedelta(0)
    early_every: dt.timedelta | None = None
    combine: bool = True
    columns: bool = True

    handles_late: ClassVar[bool] = True
    windows: ClassVar[MapStateDescriptor] = WINDOWS

    def __post_init__(self) -> None:
        if not isinstance(self.assigner, WindowAssigner):
            msg = f"WindowAggregate: assigner must be a WindowAssigner, got {self.assigner!r}"
            raise ConfigError(msg)
        if not isinstance(self.aggregate, AggregateFunction):
            msg = f"WindowAggregate: aggregate must be an AggregateFunction, got {self.aggregate!r}"
            raise ConfigError(msg)
        if self.assigner.merging and type(self.aggregate).merge is AggregateFunction.merge:
            msg = (
                f"WindowAggregate: {type(self.aggregate).__name__} has no merge(a, b), which "
                "session windows need"
            )
            raise ConfigError(msg)
        self._lateness = _millis(
            "WindowAggregate: allowed_lateness", self.allowed_lateness, positive=False
        )
        self._early = (
            0
            if self.early_every is None
            else _millis("WindowAggregate: early_every", self.early_every)
        )
        self._key_columns: tuple[str, ...] = ()
        self._time_column = ""
        self._rows = pa.table({})
        specs = self.aggregate.arrow_aggregations()
        self._specs = None if specs is None else tuple(specs)
        self._table: WindowTable | None = None

    def processes_tables(self) -> bool:
        """Windows with an Arrow aggregate whose partials merge, without early results, run
        on columns (:mod:`firesteel.state.window_table`) unless ``columns=False``."""
        return self.columns and not self._early and Combiner.supports(self._specs)

    def declared_states(self) -> dict[str, StateDescriptor]:
        """The per-key windows map and the per-key-group window table: each form uses one,
        and declares the other so that a restore finding it is told which form wrote it
        (:meth:`_refuse_other_form`) rather than of an undeclared state."""
        return {self.windows.name: self.windows, WINDOW_TABLE.name: WINDOW_TABLE}

    def _refuse_other_form(self, state: KeyState) -> None:
        """A ``ConfigError`` when the task's key groups hold the other form's windows: the
        per-key form's leave event-time timers (every open window has one), the column
        form's a window table."""
        if self.processes_tables():
            timers = state.event_timers
            if timers is not None and timers.pending():
                msg = (
                    f"operator '{state.operator}': its windows were kept per key (map state and "
                    "event-time timers: by a firesteel before the column form, or with "
                    "WindowAggregate(..., columns=False)); run it with columns=False, or start "
                    "it under another operator name (stateful(name=...))"
                )
                raise ConfigError(msg)
            return
        if any(state.group_value(WINDOW_TABLE, group) for group in state.key_groups):
            msg = (
                f"operator '{state.operator}': its windows were kept on columns (the default "
                "for an aggregate whose Arrow form merges, without early_every); run it so "
                "again, or start it under another operator name (stateful(name=...))"
            )
            raise ConfigError(msg)

    def open(self, ctx: OpenContext) -> None:
        self._time_column = ctx.require_event_time("WindowAggregate")
        self._key_columns = ctx.key_columns
        if self.processes_tables() and self._specs is not None:
            self._table = WindowTable(
                self._key_columns, self._time_column, self.assigner, self._specs, self._lateness
            )

    def process_table(self, rows: pa.Table | None, state: KeyState) -> pa.Table | None:
        """The whole task on columns (see :mod:`firesteel.state.window_table`)."""
        assert self._table is not None, "process_table() runs only when processes_tables()"
        self._refuse_other_form(state)
        windows, rejected = self._table.run(rows, state)
        if rejected is not None:
            state.emit_late(rejected)
        if windows is None:
            return None
        values = [windows.column(partial_column(i)) for i in range(len(self._table.specs))]
        results = self.aggregate.arrow_result(values)
        if results is None:
            results = _by_name(
                [
                    self.aggregate.get_result(self.aggregate.from_arrow(list(row)))
                    for row in zip(*(v.to_pylist() for v in values), strict=True)
                ]
            )
        keys = [windows.column(name) for name in self._key_columns]
        return self._results_table(keys, windows.column(START), windows.column(END), results)

    def _timers(self, windows: Mapping[int, list[Any]], watermark: int | None) -> set[int]:
        """The event-time timers ``windows`` need at ``watermark``: emit (not yet due) and
        purge; exactly the key's pending timers, since due ones have fired."""
        needed: set[int] = set()
        for end, _ in windows.values():
            if watermark is None or end - 1 > watermark:
                needed.add(end - 1)
            needed.add(end - 1 + self._lateness)
        return needed

    def _row(
        self, key: Key, start: int, end: int, accumulator: Any, *, final: bool = True
    ) -> dict[str, Any]:
        row: dict[str, Any] = dict(zip(self._key_columns, key, strict=True))
        row["window_start"] = dt.datetime.fromtimestamp(start / 1000, tz=dt.timezone.utc)
        row["window_end"] = dt.datetime.fromtimestamp(end / 1000, tz=dt.timezone.utc)
        row.update(self.aggregate.get_result(accumulator))
        if self._early:
            row[IS_FINAL] = final
        return row

    def _early_timer(self, state: KeyState) -> None:
        """The key's next early firing: the first multiple of ``early_every`` after now (one
        timer per key, which a key registering again in the same interval does not add to)."""
        now = state.processing_time_ms
        state.register_timer(now - now % self._early + self._early)

    def combiner(self, key_columns: tuple[str, ...], event_time: EventTime) -> Combiner | None:
        """The map-side combine where it is exact (see the class docs), else None."""
        specs = self.aggregate.arrow_aggregations()
        if (
            not self.combine
            or event_time.late != "drop"
            or not self.assigner.panes()
            or specs is None
            or not Combiner.supports(specs)
        ):
            return None
        return Combiner(key_columns, event_time.column, self.assigner, tuple(specs))

    def prepare(self, rows: pa.Table, starts: Sequence[int], state: KeyState) -> list[KeyPanes]:
        """The batch's records (or combined rows) as panes, one list per key (see
        :mod:`firesteel.state.panes`)."""
        self._refuse_other_form(state)
        self._rows = rows
        specs = self.aggregate.arrow_aggregations()
        if COMBINED_COLUMN in rows.column_names and specs is not None:
            specs = merge_specs(specs)
        return key_panes(
            rows,
            starts,
            time_column=self._time_column,
            assigner=self.assigner,
            aggregate=self.aggregate,
            watermark=state.watermark_ms,
            lateness=self._lateness,
            specs=specs,
        )

    def process(self, key: Key, rows: Any, state: KeyState) -> Iterator[dict[str, Any]]:
        prepared = cast(KeyPanes, rows)
        watermark = state.watermark_ms
        store = cast(MapState, state.get(self.windows))
        if self.assigner.merging:
            touched, windows = self._merge_sessions(prepared, store, state)
        else:
            touched, windows = self._update_windows(prepared.panes, store, state)
        if prepared.rejected:
            state.emit_late(self._rows.take(pa.array(sorted(prepared.rejected), pa.int64())))
        if self._early and any(_pending(windows[start][0], watermark) for start in touched):
            self._early_timer(state)
        if watermark is None:
            return
        for start in sorted(touched):
            end, accumulator = windows[start]
            if end - 1 <= watermark:  # due already: the update is a late firing
                yield self._row(key, start, end, accumulator)

    def _fold(self, pane: Pane, accumulator: Any) -> Any:
        """``accumulator`` (None: a new window's) with the pane's records in it."""
        aggregate = self.aggregate
        if pane.values is None:
            return (
                pane.partial if accumulator is None else aggregate.merge(accumulator, pane.partial)
            )
        if accumulator is None:
            accumulator = aggregate.create_accumulator()
        for value in pane.values:
            accumulator = aggregate.add(value, accumulator)
        return accumulator

    def _update_windows(
        self, panes: list[Pane], store: MapState, state: KeyState
    ) -> tuple[set[int], dict[int, list[Any]]]:
        """Tumbling and sliding windows: each pane into its window (none has expired), a new
        window with its emit (unless due already) and purge timers."""
        watermark = state.watermark_ms
        timers = cast(EventTimers, state.event_timers)
        key, key_group = state.key, state.key_group
        windows: dict[int, list[Any]] = {}
        for pane in panes:
            stored = store.get(pane.start)
            end = pane.end
            if stored is None:
                # Without allowed lateness the purge timer is the emit timer.
                if (watermark is None or end - 1 > watermark) and self._lateness:
                    timers.register(key_group, key, end - 1)
                timers.register(key_group, key, end - 1 + self._lateness)
                accumulator = self._fold(pane, None)
            else:
                accumulator = self._fold(pane, stored[1])
            windows[pane.start] = [end, accumulator]
            store.put(pane.start, [end, accumulator])
        return set(windows), windows

    def _merge_sessions(
        self, prepared: KeyPanes, store: MapState, state: KeyState
    ) -> tuple[set[int], dict[int, list[Any]]]:
        """Session windows: each pane merged with the sessions it overlaps or touches, or a
        new session unless it has expired (then its record is late); timers follow."""
        watermark = state.watermark_ms
        windows: dict[int, list[Any]] = {int(s): list(v) for s, v in store.items()}
        before = self._timers(windows, watermark)
        touched: set[int] = set()
        removed: set[int] = set()
        for pane in prepared.panes:
            start, end = pane.start, pane.end
            found: Any = None
            for other in sorted(windows):
                other_end, accumulator = windows[other]
                if other <= end and other_end >= start:
                    del windows[other]
                    removed.add(other)
                    start, end = min(start, other), max(end, other_end)
                    found = (
                        accumulator if found is None else self.aggregate.merge(found, accumulator)
                    )
            if found is None and _expired(end, self._lateness, watermark):
                prepared.rejected.append(pane.row)
                continue
            windows[start] = [end, self._fold(pane, found)]
            touched.add(start)
        touched &= set(windows)
        for start in removed - set(windows):
            store.remove(start)
        for start in sorted(touched):
            end, accumulator = windows[start]
            store.put(start, [end, accumulator])
        after = self._timers(windows, watermark)
        for timestamp in sorted(before - after):
            state.delete_event_time_timer(timestamp)
        for timestamp in sorted(after - before):
            state.register_event_time_timer(timestamp)
        return touched, windows

    def on_timer(self, key: Key, timestamp_ms: int, state: KeyState) -> Iterator[dict[str, Any]]:
        store = cast(MapState, state.get(self.windows))
        if state.time_domain is TimeDomain.PROCESSING_TIME:
            yield from self._early_results(key, store, state)
            return
        for start, end, accumulator in self._due(store, timestamp_ms):
            yield self._row(key, start, end, accumulator)

    def _due(self, store: MapState, timestamp_ms: int) -> Iterator[tuple[int, int, Any]]:
        """A key's windows due at event-time timer ``timestamp_ms``, in start order, as
        ``(start, end, accumulator)``; the windows expired by then are removed on the way."""
        kept = store.items()
        for start, (end, accumulator) in sorted(kept) if len(kept) > 1 else kept:
            if end - 1 == timestamp_ms:
                yield start, end, accumulator
            if end - 1 + self._lateness <= timestamp_ms:
                store.remove(start)

    def on_event_timers(
        self, timers: Sequence[tuple[int, int, Key]], state: KeyState
    ) -> pa.Table | list[dict[str, Any]]:
        """A round of due event-time timers at once: the due windows' results as one Arrow
        table when the aggregate has an Arrow form (its results are plain values), else
        ``on_timer``'s rows, timer by timer. Either way each key's state is read once per
        timer, its due windows emitted in start order and its expired windows purged."""
        if self.aggregate.arrow_aggregations() is None:
            rows: list[dict[str, Any]] = []
            for timestamp, key_group, key in timers:
                state.select_key(key, key_group)
                rows.extend(self.on_timer(key, timestamp, state))
            return rows
        keys: list[Key] = []
        starts: list[int] = []
        ends: list[int] = []
        results: list[Mapping[str, Any]] = []
        for timestamp, key_group, key in timers:
            state.select_key(key, key_group)
            store = cast(MapState, state.get(self.windows))
            for start, end, accumulator in self._due(store, timestamp):
                keys.append(key)
                starts.append(start)
                ends.append(end)
                results.append(self.aggregate.get_result(accumulator))
        if not keys:
            return []
        return self._results_table(
            [list(column) for column in zip(*keys, strict=True)],
            pa.array(starts, pa.int64()),
            pa.array(ends, pa.int64()),
            _by_name(results),
        )

    def _results_table(
        self,
        keys: Sequence[Any],
        starts: pa.Array | pa.ChunkedArray,
        ends: pa.Array | pa.ChunkedArray,
        results: Mapping[str, Any],
    ) -> pa.Table:
        """Final window results (at least one) as an Arrow table, which the operator casts
        to the output schema: key columns (one column of values each), bounds (epoch ms) as
        UTC millisecond timestamps, the result columns by name."""
        stamp = pa.timestamp("ms", tz="UTC")
        columns: dict[str, Any] = dict(zip(self._key_columns, keys, strict=True))
        columns["window_start"] = starts.cast(stamp)
        columns["window_end"] = ends.cast(stamp)
        columns.update(results)
        if self._early:
            columns[IS_FINAL] = pa.array([True] * len(starts), pa.bool_())
        return pa.table(columns)

    def _early_results(
        self, key: Key, store: MapState, state: KeyState
    ) -> Iterator[dict[str, Any]]:
        """An early firing: the current result of each of the key's windows not yet due;
        the next firing while one is left."""
        pending = [
            (start, end, accumulator)
            for start, (end, accumulator) in sorted(store.items())
            if _pending(end, state.watermark_ms)
        ]
        for start, end, accumulator in pending:
            yield self._row(key, start, end, accumulator, final=False)
        if pending:
            self._early_timer(state)


def _by_name(results: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Per-window results (mappings of column to value) as columns, by the first's names."""
    return {name: [result.get(name) for result in results] for name in results[0]}


def _pending(end: int, watermark: int | None) -> bool:
    """A window of this ``end`` is not due yet at ``watermark``."""
    return watermark is None or end - 1 > watermark


def _expired(end: int, lateness: int, watermark: int | None) -> bool:
    return watermark is not None and end - 1 + lateness <= watermark


__all__ = [
    "IS_FINAL",
    "AggregateFunction",
    "Count",
    "EventTimeSessionWindows",
    "Max",
    "Min",
    "SlidingEventTimeWindows",
    "Sum",
    "TumblingEventTimeWindows",
    "WindowAggregate",
    "WindowAssigner",
]
