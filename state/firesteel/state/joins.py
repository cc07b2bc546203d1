"""The interval join of two keyed inputs in event time (Flink's ``intervalJoin().between()``)::

    from firesteel.state.joins import IntervalJoin

    joined = stateful(
        impressions, key="ad", right=clicks,
        processor=IntervalJoin(lower=dt.timedelta(0), upper=dt.timedelta(minutes=10)),
        output_schema="ad string, ts timestamp, user string, right_ts timestamp, ...",
        backend=backend, event_time="ts", watermark=BoundedOutOfOrderness(dt.timedelta(seconds=5)))

A left record ``a`` and a right record ``b`` of the same key join when ``a.ts + lower <=
b.ts <= a.ts + upper`` (that is, ``a.ts BETWEEN b.ts - upper AND b.ts - lower``; ``lower``
may be negative). Each input's records wait in the key's map state (``left`` / ``right``,
event time -> records) for as long as a record of the other input could still match: a
left record until the watermark reaches ``a.ts + upper``, a right one until it reaches
``b.ts - lower``, when an event-time timer purges them; a record that can match nothing
still to come is not kept at all. Each pair is emitted once, in the batch where the later
of the two arrives. Late records (at or behind the watermark) of either input go to the
side output. The result row is ``join(left, right)``: by default the left record's columns,
then the right record's other columns, a name the left one has already prefixed with
``right_`` (the key columns once).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import pyarrow as pa

from firesteel.core.spi import ConfigError
from firesteel.state.api import MapState
from firesteel.state.backend import Key
from firesteel.state.coprocess import CoProcessor
from firesteel.state.descriptors import MapStateDescriptor
from firesteel.state.eventtime import epoch_ms
from firesteel.state.processor import KeyState, OpenContext

_MS = dt.timedelta(milliseconds=1)

JoinFunction = Callable[[dict[str, Any], dict[str, Any]], Mapping[str, Any]]
"""Builds one output row from a left and a right record (dicts of their columns)."""


@dataclass
class IntervalJoin(CoProcessor):
    """Joins left and right records of a key whose event times are within the interval
    (see module docs)."""

    lower: dt.timedelta
    upper: dt.timedelta
    join: JoinFunction | None = None
    _key_columns: tuple[str, ...] = field(default=(), init=False, repr=False)
    _time_column: str = field(default="", init=False, repr=False)

    left: ClassVar[MapStateDescriptor] = MapStateDescriptor("left", list, key_type=int)
    right: ClassVar[MapStateDescriptor] = MapStateDescriptor("right", list, key_type=int)

    def __post_init__(self) -> None:
        for name in ("lower", "upper"):
            if not isinstance(getattr(self, name), dt.timedelta):
                msg = f"IntervalJoin: {name} must be a timedelta, got {getattr(self, name)!r}"
                raise ConfigError(msg)
        if self.lower > self.upper:
            msg = f"IntervalJoin: lower {self.lower} is above upper {self.upper}"
            raise ConfigError(msg)
        self._lower = self.lower // _MS
        self._upper = self.upper // _MS

    def open(self, ctx: OpenContext) -> None:
        self._time_column = ctx.require_event_time("IntervalJoin", "<column in both inputs>")
        self._key_columns = ctx.key_columns

    def _joined(self, left: dict[str, Any], right: dict[str, Any]) -> Mapping[str, Any]:
        if self.join is not None:
            return self.join(left, right)
        row = dict(left)
        for name, value in right.items():
            if name in self._key_columns:
                continue
            row[f"right_{name}" if name in left else name] = value
        return row

    def _side(
        self, key: Key, rows: pa.Table, state: KeyState, *, mine: MapStateDescriptor
    ) -> Iterator[Mapping[str, Any]]:
        is_left = mine is self.left
        kept = cast(MapState, state.get(mine))
        other = cast(MapState, state.get(self.right if is_left else self.left))
        waiting = [(int(ts), records) for ts, records in other.items()]
        watermark = state.watermark_ms
        times = epoch_ms(rows.column(self._time_column)).to_pylist()
        records = rows.drop_columns(
            [c for c in rows.column_names if c.startswith("__")]
        ).to_pylist()
        for ts, record in zip(times, records, strict=True):
            if ts is None:
                continue  # no event time: it can be in no interval
            low, high = (
                (ts + self._lower, ts + self._upper)
                if is_left
                else (
                    ts - self._upper,
                    ts - self._lower,
                )
            )
            for other_ts, others in waiting:
                if low <= other_ts <= high:
                    for found in others:
                        yield (
                            self._joined(record, found) if is_left else self._joined(found, record)
                        )
            # Kept while a record of the other input still to come (after the watermark)
            # can match it.
            until = high
            if watermark is None or until > watermark:
                kept.put(ts, [*kept.get(ts, []), record])
                state.register_event_time_timer(until)

    def process_left(self, key: Key, rows: Any, state: KeyState) -> Iterator[Mapping[str, Any]]:
        return self._side(key, rows, state, mine=self.left)

    def process_right(self, key: Key, rows: Any, state: KeyState) -> Iterator[Mapping[str, Any]]:
        return self._side(key, rows, state, mine=self.right)

    def on_timer(self, key: Key, timestamp_ms: int, state: KeyState) -> None:
        left = cast(MapState, state.get(self.left))
        for ts in [int(t) for t in left if int(t) + self._upper <= timestamp_ms]:
            left.remove(ts)
        right = cast(MapState, state.get(self.right))
        for ts in [int(t) for t in right if int(t) - self._lower <= timestamp_ms]:
            right.remove(ts)
