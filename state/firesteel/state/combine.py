"""Map-side combine: each input task folds its records per key and window pane before
firesteel's shuffle, as Spark's partial aggregation does before its own.

A pane is the set of event times that share all their windows: a tumbling window, or a
sliding window's slide when the size is a multiple of the slide. An input task groups its
records per key and pane with one Arrow hash aggregation (the aggregate's Arrow form) and
ships one row per group: the key, the pane's start as event time (which the assigner puts
in exactly the windows of each of the group's records), the partial values and
:data:`~firesteel.state.eventtime.COMBINED_COLUMN`, the number of records the row stands
for. The window operator folds such rows with the Arrow form's merge (a count's partials
are summed, a minimum's take their minimum...) where it folds records now.

Exact only where a late record needs not reach anything as itself: the window operator
asks for a combine under ``late="drop"`` only (a dropped row counts as its records), and
records without event time travel as one row per key (dropped and counted too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from firesteel.state.eventtime import COMBINED_COLUMN, event_millis

if TYPE_CHECKING:
    from firesteel.state.windows import WindowAssigner

MERGES = {"count_all": "sum", "count": "sum", "sum": "sum", "min": "min", "max": "max"}
"""Arrow hash aggregations whose values over parts of a group give the group's value
through another one (the merge): the ones a combine can ship as partials."""

_PANE = "__firesteel_pane_start__"
_TIME_UNITS = ("ms", "us", "ns")


def partial_column(index: int) -> str:
    """The combined rows' column of the Arrow form's ``index``-th aggregation."""
    return f"__firesteel_partial_{index}__"


def merge_specs(specs: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The Arrow form that folds combined rows: each aggregation's merge over its partials."""
    return [(partial_column(i), MERGES[spec[1]]) for i, spec in enumerate(specs)]


def spec_columns(specs: Sequence[tuple[Any, ...]], skip: Sequence[str] = ()) -> list[str]:
    """The columns an Arrow form's aggregations read, once each, in order, those of
    ``skip`` aside."""
    found: list[str] = []
    for spec in specs:
        target = spec[0]
        for name in [target] if isinstance(target, str) else target:
            if name not in found and name not in skip:
                found.append(name)
    return found


def grouped(
    table: pa.Table, keys: Sequence[str], specs: Sequence[tuple[Any, ...]]
) -> tuple[list[pa.ChunkedArray], list[pa.ChunkedArray]]:
    """One Arrow hash aggregation of ``table`` by ``keys``: the group keys' columns and the
    aggregations' columns (in the order of ``specs``), one row per group."""
    done = table.group_by(list(keys), use_threads=False).aggregate(list(specs))
    count = len(keys)
    # Arrow puts the group keys before the aggregations or, in older versions, after.
    if done.column_names[:count] == list(keys):
        return done.columns[:count], done.columns[count:]
    return done.columns[-count:], done.columns[:-count]


@dataclass(frozen=True)
class Combiner:
    """The picklable map-side combine of one window operator (see module docs)."""

    key_columns: tuple[str, ...]
    time_column: str
    assigner: WindowAssigner
    specs: tuple[tuple[Any, ...], ...]
    """The aggregate's Arrow form: ``(column or [], function)`` pairs, functions of
    :data:`MERGES`."""

    @staticmethod
    def supports(specs: Sequence[tuple[Any, ...]] | None) -> bool:
        """Whether an Arrow form can be shipped as partials (no options, known merges)."""
        return bool(specs) and all(
            len(spec) == 2 and spec[1] in MERGES and isinstance(spec[0], str | list)
            for spec in specs or ()
        )

    def _targets(self) -> list[str]:
        """The columns the aggregations read, once each, key columns aside."""
        return spec_columns(self.specs, skip=self.key_columns)

    def input_columns(self) -> list[str]:
        """The input columns the combine reads (the others are left before the map side)."""
        targets = [c for c in self._targets() if c != self.time_column]
        return [*self.key_columns, self.time_column, *targets]

    def output_schema(self, schema: pa.Schema) -> pa.Schema | None:
        """The combined rows' schema for input rows of ``schema``: key and time columns as
        given, the partials, the record count; None where the combine does not apply (a
        time column of whole seconds, a key type Arrow cannot group)."""
        kind = schema.field(self.time_column).type
        if not pa.types.is_timestamp(kind) or kind.unit not in _TIME_UNITS:
            return None
        try:
            empty = self.combine(schema.empty_table())
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None
        return empty.schema

    def combine(self, rows: pa.Table) -> pa.Table:
        """One row per key and pane of ``rows`` (see module docs), in no particular order."""
        millis, present = event_millis(rows.column(self.time_column))
        panes = pa.array(self.assigner.pane_starts(millis), pa.int64(), mask=~present)
        work = rows.select([*self.key_columns, *self._targets()]).append_column(_PANE, panes)
        key_part, values = grouped(
            work, [*self.key_columns, _PANE], [*self.specs, ([], "count_all")]
        )
        kind = rows.schema.field(self.time_column).type
        start = key_part[-1].cast(pa.timestamp("ms", tz=kind.tz)).cast(kind)
        names = [
            *self.key_columns,
            self.time_column,
            *(partial_column(i) for i in range(len(self.specs))),
            COMBINED_COLUMN,
        ]
        return pa.table([*key_part[:-1], start, *values], names=names)


__all__ = ["MERGES", "Combiner", "grouped", "merge_specs", "partial_column", "spec_columns"]
