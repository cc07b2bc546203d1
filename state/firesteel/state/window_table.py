"""Windows kept as one Arrow table per key group: the window operator without Python per key
or window.

A :class:`~firesteel.state.windows.WindowAggregate` whose aggregate has an Arrow form with
merges (:data:`~firesteel.state.combine.MERGES`: ``Count``, ``Sum``, ``Min``, ``Max``), which
emits no early results and was not given ``columns=False``, gets the task's whole input at
once (``KeyedProcessor.process_table``) and works on columns:

* the open windows of a key group are one value of the reserved state
  :data:`WINDOW_TABLE`: an Arrow IPC stream of the key columns, the window's start and end
  (epoch ms), whether it fired, and its partial values (one column per aggregation). It
  moves with its key group through restarts, rescales and savepoints, on every backend,
  as event-time timers do;
* a window is due once the watermark ``W >= end - 1``: a due window that has not fired
  emits its result and is marked fired (where the per-key form fires a timer); once ``W >=
  end - 1 + allowed_lateness`` it has expired and is dropped;
* each record of the batch becomes a window of its own holding its partials (a count's 1,
  a sum's value; a map-side combine's row its partials), and one hash aggregation merges
  them with the kept windows through each aggregation's merge: per key and window start
  for tumbling and sliding windows; per run of windows that overlap or touch for sessions,
  where a record whose own window has expired is late unless it touches a kept session
  (see :meth:`WindowTable._sessions`). A record whose windows have all expired is late, so
  is one without event time. A window that got records and is due emits its updated result
  (a late firing, once per batch); a session that grew past the watermark fires again once
  it is due.

The results are the per-key form's, batch by batch: the window tests run both forms
against one plain-Python reference. The two forms keep different states, so an operator's
state cannot move from one to the other: a restore finding the other form's windows fails
saying which form wrote them (``WindowAggregate._refuse_other_form``), rather than starting
empty. A batch reads and writes back the whole table of every key group it touches: cheap
when it touches many of the open windows, more than the per-key form writes when it
touches few of many (see ``WindowAggregate``'s ``columns``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from firesteel.core.spi import ConfigError
from firesteel.state.combine import MERGES, grouped, partial_column
from firesteel.state.descriptors import reserved_value_state
from firesteel.state.eventtime import COMBINED_COLUMN, event_millis
from firesteel.state.keygroups import KEY_GROUP_COLUMN
from firesteel.state.panes import running, session_starts

if TYPE_CHECKING:
    from firesteel.state.processor import KeyState
    from firesteel.state.windows import WindowAssigner

WINDOW_TABLE = reserved_value_state("__firesteel_window_table__", bytes)
"""Per key group: its open windows, an Arrow IPC stream (see module docs)."""

START = "__firesteel_start__"
END = "__firesteel_end__"
FIRED = "__firesteel_fired__"
_TOUCHED = "__firesteel_touched__"
_SPECS = b"firesteel.aggregations"


_SESSION = "__firesteel_session__"
_EARLIEST = np.iinfo(np.int64).min
_LATEST = np.iinfo(np.int64).max


def _key_ids(table: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """One integer per row, equal where the key columns are (nulls one key)."""
    ids = np.zeros(table.num_rows, dtype=np.int64)
    distinct = 1
    for name in columns:
        encoded = pc.dictionary_encode(table.column(name).combine_chunks(), null_encoding="encode")
        indices = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        size = max(1, len(encoded.dictionary))
        if distinct * size >= 2**62:
            # Renumber the combinations seen so far (at most one per row) before the product
            # of the columns' distinct values could overflow.
            ids = np.unique(ids, return_inverse=True)[1].astype(np.int64)
            distinct = int(ids.max()) + 1 if len(ids) else 1
        ids = ids * size + indices
        distinct *= size
    return ids


def _with_fired(windows: pa.Table, fired: np.ndarray) -> pa.Table:
    """``windows`` with the :data:`FIRED` column ``fired``."""
    return windows.set_column(windows.schema.get_field_index(FIRED), FIRED, pa.array(fired))


def _before_in_key(running: np.ndarray, first: np.ndarray, empty: int) -> np.ndarray:
    """At each position, ``running`` at the position before it in its key (``first`` marks
    each key's first position), or ``empty`` at a key's first."""
    shifted = np.empty_like(running)
    shifted[1:] = running[:-1]
    shifted[:1] = empty
    return np.where(first, empty, shifted)


def _target(target: str | Sequence[str]) -> str:
    """The one column an aggregation with merges reads (given alone or in a list)."""
    return target if isinstance(target, str) else target[0]


@dataclass(frozen=True)
class WindowTable:
    """The columnar window operator of one :class:`~firesteel.state.windows.WindowAggregate`
    (see module docs)."""

    key_columns: tuple[str, ...]
    time_column: str
    assigner: WindowAssigner
    specs: tuple[tuple[Any, ...], ...]
    """The aggregate's Arrow form."""
    lateness: int

    @property
    def partials(self) -> list[str]:
        """The stored windows' columns of partial values, in the order of :attr:`specs`."""
        return [partial_column(i) for i in range(len(self.specs))]

    def run(
        self, rows: pa.Table | None, state: KeyState
    ) -> tuple[pa.Table | None, pa.Table | None]:
        """One task's batch: the windows to emit (key columns, :data:`START`, :data:`END`,
        the partials) and the input rows no window takes (late), either None when empty.
        ``rows`` carry :data:`~firesteel.state.keygroups.KEY_GROUP_COLUMN`."""
        watermark = state.watermark_ms
        stored = self._load(state)
        emitted: list[pa.Table] = []
        changed: set[int] = set()
        if stored is not None and watermark is not None:
            stored = self._fire_due(stored, watermark, emitted, changed)
        rejected = None
        if rows is not None and rows.num_rows:
            if self.assigner.merging:
                merged, rejected = self._sessions(stored, rows, watermark)
            else:
                merged, rejected = self._windows(stored, rows, watermark)
            if merged is not None:
                stored = self._updated(merged, watermark, emitted, changed)
        if changed and stored is not None:
            self._save(stored, changed, state)
        if not emitted:
            return None, rejected
        columns = [*self.key_columns, START, END, *self.partials]
        windows = pa.concat_tables(
            [part.select(columns) for part in emitted], promote_options="permissive"
        )
        return windows, rejected

    def _load(self, state: KeyState) -> pa.Table | None:
        """The open windows of the task's key groups, with their key group column."""
        parts = []
        for key_group in state.key_groups:
            blob = state.group_value(WINDOW_TABLE, key_group)
            if not blob:
                continue
            table = pa.ipc.open_stream(blob).read_all()
            self._check(table.schema, state, key_group)
            groups = pa.array(np.full(table.num_rows, key_group, dtype=np.int32))
            parts.append(table.append_column(KEY_GROUP_COLUMN, groups))
        if not parts:
            return None
        return (
            parts[0] if len(parts) == 1 else pa.concat_tables(parts, promote_options="permissive")
        )

    def _check(self, schema: pa.Schema, state: KeyState, key_group: int) -> None:
        recorded = (schema.metadata or {}).get(_SPECS)
        mine = self._recorded_specs()
        if recorded != mine:
            found = recorded.decode() if recorded else "nothing"
            msg = (
                f"operator '{state.operator}': the window state of key group {key_group} was "
                f"written for the aggregations {found}, but the aggregate computes "
                f"{mine.decode()}: keep the aggregate, or run the new one under another "
                "operator name (stateful(name=...))"
            )
            raise ConfigError(msg)

    def _recorded_specs(self) -> bytes:
        return json.dumps([[target, function] for target, function in self.specs]).encode()

    def _fire_due(
        self, stored: pa.Table, watermark: int, emitted: list[pa.Table], changed: set[int]
    ) -> pa.Table:
        """Emit the windows due and not fired yet (marked fired), drop the expired ones."""
        end = stored.column(END).to_numpy()
        fired = np.asarray(stored.column(FIRED).to_numpy(), dtype=bool)
        due = (end - 1 <= watermark) & ~fired
        expired = end - 1 + self.lateness <= watermark
        touched = due | expired
        if not touched.any():
            return stored
        groups = stored.column(KEY_GROUP_COLUMN).to_numpy()
        changed.update(np.unique(groups[touched]).tolist())
        if due.any():
            emitted.append(stored.filter(pa.array(due)))
            stored = _with_fired(stored, fired | due)
        return stored.filter(pa.array(~expired)) if expired.any() else stored

    def _placed(self, rows: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Each window of each record with event time: ``(row, start, end)`` arrays, and
        a mask of the rows without event time."""
        stamps, present = event_millis(rows.column(self.time_column))
        timed = np.flatnonzero(present)
        local, start, end = self.assigner.assign_all(stamps[timed])
        return timed[local], start, end, ~present

    def _items(
        self, rows: pa.Table, record: np.ndarray, start: np.ndarray, end: np.ndarray
    ) -> pa.Table:
        """Windows of single records as partials (key columns, start, end, key group,
        partials, not fired, touched): what each aggregation makes of one record (a count's
        1, a sum's or an extreme's value), so one merge folds records and kept windows
        alike; a combined row carries its partials already."""
        taken = pa.array(record)
        count = len(record)
        columns = [rows.column(c).take(taken) for c in self.key_columns]
        columns += [pa.array(start, pa.int64()), pa.array(end, pa.int64())]
        columns.append(rows.column(KEY_GROUP_COLUMN).take(taken))
        combined = COMBINED_COLUMN in rows.column_names
        for index, (target, function) in enumerate(self.specs):
            if combined:
                columns.append(rows.column(partial_column(index)).take(taken))
            elif function == "count_all":
                columns.append(pa.array(np.ones(count, dtype=np.int64)))
            elif function == "count":
                valid = pc.is_valid(rows.column(_target(target)).take(taken))
                columns.append(pc.cast(valid, pa.int64()))
            else:
                columns.append(rows.column(_target(target)).take(taken))
        columns += [pa.array(np.zeros(count, dtype=bool)), pa.array(np.ones(count, dtype=bool))]
        return pa.table(columns, names=self._names)

    @property
    def _names(self) -> list[str]:
        return [*self.key_columns, START, END, KEY_GROUP_COLUMN, *self.partials, FIRED, _TOUCHED]

    def _with_stored(self, stored: pa.Table | None, items: pa.Table) -> pa.Table:
        """The kept windows (not touched) before ``items``, in one table."""
        if stored is None or not stored.num_rows:
            return items
        untouched = pa.array(np.zeros(stored.num_rows, dtype=bool))
        return pa.concat_tables(
            [stored.append_column(_TOUCHED, untouched).select(self._names), items],
            promote_options="permissive",
        )

    def _merges(self) -> list[tuple[str, str]]:
        return [
            (name, MERGES[function])
            for name, (_, function) in zip(self.partials, self.specs, strict=True)
        ]

    def _windows(
        self, stored: pa.Table | None, rows: pa.Table, watermark: int | None
    ) -> tuple[pa.Table | None, pa.Table | None]:
        """Tumbling and sliding windows: the kept windows with the records of live windows
        merged in (one row per key and window, touched where records came), and the rows
        whose windows have all expired or that have no event time."""
        record, start, end, _ = self._placed(rows)
        if watermark is not None:
            live = end - 1 + self.lateness > watermark
            record, start, end = record[live], start[live], end[live]
        placed = np.zeros(rows.num_rows, dtype=bool)
        placed[record] = True
        rejected = None if placed.all() else rows.take(pa.array(np.flatnonzero(~placed)))
        if not len(record):
            return None, rejected
        both = self._with_stored(stored, self._items(rows, record, start, end))
        group_keys, values = grouped(
            both,
            [*self.key_columns, START],
            [
                (END, "min"),
                (KEY_GROUP_COLUMN, "min"),
                *self._merges(),
                (FIRED, "max"),
                (_TOUCHED, "max"),
            ],
        )
        return pa.table([*group_keys, *values], names=self._names), rejected

    def _sessions(
        self, stored: pa.Table | None, rows: pa.Table, watermark: int | None
    ) -> tuple[pa.Table | None, pa.Table | None]:
        """Session windows: the kept sessions and the records' windows that join them, merged
        where they overlap or touch (touched where records came), and the late rows.

        As the per-key form decides, in order of window start: a record whose own window has
        not expired always opens or joins a session; one whose window has expired is late
        unless it touches a kept session or a window an earlier record put in. The earlier
        records that count come down to the kept sessions: a record with an unexpired window
        starts after every expired one (expiry follows event time), and a kept session that
        an expired record touches ends after the start of every other expired record's
        window (a kept session's ``end - 1 + lateness`` is past the watermark, an expired
        window's ``start + gap - 1 + lateness`` is not), so any expired record that touches
        the first touches the session too."""
        record, start, end, untimed = self._placed(rows)
        items = self._with_stored(stored, self._items(rows, record, start, end))
        kept = items.num_rows - len(record)
        count = items.num_rows
        is_kept = np.zeros(count, dtype=bool)
        is_kept[:kept] = True
        doubtful = np.zeros(count, dtype=bool)
        if watermark is not None:
            doubtful[kept:] = end - 1 + self.lateness <= watermark
        keys = _key_ids(items, self.key_columns)
        starts = items.column(START).to_numpy()
        ends = items.column(END).to_numpy()
        order = np.lexsort((np.arange(count), starts, keys))
        keys, starts, ends = keys[order], starts[order], ends[order]
        is_kept, doubtful = is_kept[order], doubtful[order]
        first = np.ones(count, dtype=bool)
        first[1:] = keys[1:] != keys[:-1]
        accepted = ~doubtful
        if doubtful.any():
            # The latest end of the key's kept sessions before each position, and the start
            # of its next kept session after it.
            reach = running(np.where(is_kept, ends, _EARLIEST), keys, "cummax")
            before = _before_in_key(reach, first, _EARLIEST)
            suffix = running(np.where(is_kept, starts, _LATEST)[::-1], keys[::-1], "cummin")
            after = np.full(count, _LATEST, dtype=np.int64)
            after[:-1] = suffix[::-1][1:]
            after[np.flatnonzero(np.append(keys[1:] != keys[:-1], True))] = _LATEST
            accepted |= doubtful & ((before >= starts) | (after <= ends))
        late = np.zeros(rows.num_rows, dtype=bool)
        late[untimed] = True
        refused = order[~accepted] - kept
        late[record[refused]] = True
        rejected = rows.take(pa.array(np.flatnonzero(late))) if late.any() else None
        taken = order[accepted]
        if not len(taken):
            return None, rejected
        keys, starts, ends = keys[accepted], starts[accepted], ends[accepted]
        opens = session_starts(keys, starts, ends)
        session = np.cumsum(opens) - 1
        joined = items.take(pa.array(taken)).append_column(_SESSION, pa.array(session))
        group_keys, values = grouped(
            joined,
            [_SESSION],
            [
                (START, "min"),
                (END, "max"),
                (KEY_GROUP_COLUMN, "min"),
                *self._merges(),
                (FIRED, "max"),
                (_TOUCHED, "max"),
            ],
        )
        done = pa.table(
            [*group_keys, *values],
            names=[_SESSION, START, END, KEY_GROUP_COLUMN, *self.partials, FIRED, _TOUCHED],
        )
        done = done.take(pc.sort_indices(done.column(_SESSION)))
        heads = joined.select(list(self.key_columns)).take(pa.array(np.flatnonzero(opens)))
        merged = pa.table(
            [*heads.columns, *done.drop_columns([_SESSION]).columns], names=self._names
        )
        return merged, rejected

    def _updated(
        self, merged: pa.Table, watermark: int | None, emitted: list[pa.Table], changed: set[int]
    ) -> pa.Table:
        """The windows after a batch's records: a touched window that is due emits (again)
        and is marked fired; one not due is not (a session that grew past the watermark
        fires once it is due again)."""
        touched = np.asarray(merged.column(_TOUCHED).to_numpy(), dtype=bool)
        groups = merged.column(KEY_GROUP_COLUMN).to_numpy()
        changed.update(np.unique(groups[touched]).tolist())
        if watermark is not None:
            end = merged.column(END).to_numpy()
            again = touched & (end - 1 <= watermark)
            if again.any():
                emitted.append(merged.filter(pa.array(again)))
            fired = np.asarray(merged.column(FIRED).to_numpy(), dtype=bool)
            merged = _with_fired(merged, np.where(touched, again, fired))
        return merged.drop_columns([_TOUCHED])

    def _save(self, stored: pa.Table, changed: set[int], state: KeyState) -> None:
        """Write the windows of each key group in ``changed`` (none left: the value cleared)."""
        groups = stored.column(KEY_GROUP_COLUMN).to_numpy()
        order = np.argsort(groups, kind="stable")
        ordered = stored.take(pa.array(order)).drop_columns([KEY_GROUP_COLUMN])
        ordered = ordered.replace_schema_metadata({_SPECS: self._recorded_specs()})
        bounds = groups[order]
        for key_group in sorted(changed):
            low, high = np.searchsorted(bounds, [key_group, key_group + 1])
            if low == high:
                state.set_group_value(WINDOW_TABLE, key_group, None)
                continue
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, ordered.schema) as writer:
                writer.write_table(ordered.slice(int(low), int(high - low)))
            state.set_group_value(WINDOW_TABLE, key_group, sink.getvalue().to_pybytes())


__all__ = ["END", "START", "WINDOW_TABLE", "WindowTable"]
