"""A batch's records folded into one pane per key and window before state is touched.

The window operator's ``prepare`` (:mod:`firesteel.state.windows`): the whole batch's
windows are assigned, the expired ones dropped and the records grouped per key and window
with numpy and Arrow, so ``process`` touches each window's state and timers once per batch
whatever the number of its records. A pane is a window's records of the batch: folded into
one partial accumulator with the aggregate's Arrow form (a hash aggregation per pane,
merged into the window's accumulator with ``merge``), or kept as records, in event-time
order, for an aggregate without one (added one by one with ``add``).

Session windows (a merging assigner): a key's records whose windows overlap or touch form
one pane, so a pane merges with the sessions in state as each of its records would have.
The pane of a run whose first record's own window has expired is split into one pane per
record: such a record is late unless it touches a session still kept, which only state
can tell.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from firesteel.state.combine import spec_columns
from firesteel.state.eventtime import event_millis

if TYPE_CHECKING:
    from firesteel.state.windows import AggregateFunction, WindowAssigner

_GROUP = "__firesteel_pane__"


class Pane(NamedTuple):
    """The records of one key's batch in one window ``[start, end)`` (epoch ms)."""

    start: int
    end: int
    partial: Any
    """Their accumulator (the aggregate's Arrow form), or None when ``values`` holds them."""
    values: list[dict[str, Any]] | None
    """The records, in event-time order (ties in input order), for ``add``; or None."""
    row: int
    """A session pane of one record that may be late: its row in the batch; else -1."""


class KeyPanes:
    """One key's panes (oldest window first) and its rows no window can take."""

    __slots__ = ("panes", "rejected")

    def __init__(self) -> None:
        self.panes: list[Pane] = []
        self.rejected: list[int] = []
        """Rows (of the batch) without event time, or whose windows have all expired."""


def key_panes(
    rows: pa.Table,
    starts: Sequence[int],
    *,
    time_column: str,
    assigner: WindowAssigner,
    aggregate: AggregateFunction,
    watermark: int | None,
    lateness: int,
    specs: Sequence[tuple[Any, ...]] | None,
) -> list[KeyPanes]:
    """The panes of each key of ``rows`` (key ``i``'s rows start at ``starts[i]``), folded
    with the Arrow form ``specs`` (the aggregate's, or its merge over combined rows) or,
    when None, kept as records for ``add``."""
    count = rows.num_rows
    offsets = np.asarray(starts, dtype=np.int64)
    key_of_row = np.repeat(
        np.arange(len(offsets), dtype=np.int64), np.diff(np.append(offsets, count))
    )
    stamps, present = event_millis(rows.column(time_column))
    timed = np.flatnonzero(present)
    local, start, end = assigner.assign_all(stamps[timed])
    record = timed[local]
    if not assigner.merging and watermark is not None:
        live = end - 1 + lateness > watermark
        record, start, end = record[live], start[live], end[live]
    key = key_of_row[record]
    order = np.lexsort((record, stamps[record], start, key))
    record, start, end, key = record[order], start[order], end[order], key[order]
    first = _pane_starts(key, start, end, watermark, lateness, merging=assigner.merging)
    out = [KeyPanes() for _ in range(len(offsets))]
    if len(first):
        _fill(
            out,
            rows,
            record=record,
            key=key,
            start=start,
            end=end,
            first=first,
            aggregate=aggregate,
            specs=specs,
            merging=assigner.merging,
        )
    placed = np.zeros(count, dtype=bool)
    placed[record] = True
    rejected = np.flatnonzero(~placed)
    for row, owner in zip(rejected.tolist(), key_of_row[rejected].tolist(), strict=True):
        out[owner].rejected.append(row)
    return out


def running(values: np.ndarray, keys: np.ndarray, how: str) -> np.ndarray:
    """The running maximum (``cummax``) or minimum (``cummin``) of ``values`` within each
    key of ``keys``."""
    import pandas as pd

    by_key = pd.Series(values).groupby(keys, sort=False)
    return np.asarray(getattr(by_key, how)().to_numpy(), dtype=np.int64)


def session_starts(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Among windows sorted by key and start, true where a session begins: a session goes
    on while a window starts at or before the latest end of the key's windows so far
    (windows that overlap or touch merge)."""
    new = np.ones(len(key), dtype=bool)
    if len(key):
        reach = running(end, key, "cummax")
        new[1:] = (key[1:] != key[:-1]) | (start[1:] > reach[:-1])
    return new


def _pane_starts(
    key: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    watermark: int | None,
    lateness: int,
    *,
    merging: bool,
) -> np.ndarray:
    """Where each pane starts among the windows sorted by key, start, time and row."""
    if not merging:
        new = np.ones(len(key), dtype=bool)
        new[1:] = (key[1:] != key[:-1]) | (start[1:] != start[:-1])
        return np.flatnonzero(new)
    new = session_starts(key, start, end)
    if watermark is None:
        return np.flatnonzero(new)
    run = np.cumsum(new) - 1
    heads = np.flatnonzero(new)
    doubtful = (end[heads] - 1 + lateness <= watermark)[run]
    return np.flatnonzero(new | doubtful)


def _fill(
    out: list[KeyPanes],
    rows: pa.Table,
    *,
    record: np.ndarray,
    key: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    first: np.ndarray,
    aggregate: AggregateFunction,
    specs: Sequence[tuple[Any, ...]] | None,
    merging: bool,
) -> None:
    """Append each pane to its key's list, with its partial accumulator or its records."""
    starts = np.minimum.reduceat(start, first).tolist()
    ends = np.maximum.reduceat(end, first).tolist()
    owners = key[first].tolist()
    lasts = [*first[1:].tolist(), len(record)]
    heads = first.tolist()
    if merging:
        lone = np.diff(np.append(first, len(record))) == 1
        single = np.where(lone, record[first], -1).tolist()
    else:
        single = [-1] * len(heads)
    if specs is not None:
        partials = _partials(rows, record, first, specs, aggregate)
        for index, owner in enumerate(owners):
            out[owner].panes.append(
                Pane(starts[index], ends[index], partials[index], None, single[index])
            )
        return
    values = rows.take(pa.array(record)).to_pylist()
    for index, owner in enumerate(owners):
        records = values[heads[index] : lasts[index]]
        out[owner].panes.append(Pane(starts[index], ends[index], None, records, single[index]))


def _partials(
    rows: pa.Table,
    record: np.ndarray,
    first: np.ndarray,
    specs: Sequence[tuple[Any, ...]],
    aggregate: AggregateFunction,
) -> list[Any]:
    """Each pane's accumulator, from one Arrow hash aggregation over the batch."""
    needed = spec_columns(specs)
    marks = np.zeros(len(record), dtype=np.int64)
    marks[first[1:]] = 1
    groups = pa.array(np.cumsum(marks))
    if needed:
        table = rows.select(needed).take(pa.array(record)).append_column(_GROUP, groups)
    else:  # a table of no columns has no rows either
        table = pa.table({_GROUP: groups})
    grouped = table.group_by(_GROUP, use_threads=False).aggregate(list(specs))
    order = pc.sort_indices(grouped.column(_GROUP))
    columns = [
        grouped.column(name).take(order).to_pylist()
        for name in grouped.column_names
        if name != _GROUP
    ]
    return [aggregate.from_arrow(values) for values in zip(*columns, strict=True)]


__all__ = ["KeyPanes", "Pane", "key_panes", "running", "session_starts"]
