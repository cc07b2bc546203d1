"""Two keyed inputs sharing the key's state and timers (Flink's ``KeyedCoProcessFunction``)::

    class Match(CoProcessor):
        order = ValueStateDescriptor("order", dict)

        def process_left(self, key, rows, state):    # orders
            state.value(self.order).update(rows.to_pylist()[-1])

        def process_right(self, key, rows, state):   # payments
            ...

    out = stateful(orders, key="order_id", processor=Match(), right=payments, ...)

Both inputs are keyed by the same key columns (same names and types), shuffled together
and processed by one operator: per key and batch, ``process_left`` gets the key's rows of
the left input, then ``process_right`` those of the right input (each with its own input's
columns), both with the same ``state`` (its states, processing-time and event-time timers);
``on_timer`` serves both. With ``event_time``, the column must be in both inputs: the
watermark follows both, and late records of either go to the side output, where their
``__side`` column says ``left`` or ``right``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from firesteel.core.spi import ConfigError
from firesteel.state.backend import Key
from firesteel.state.processor import KeyedProcessor, KeyState, Output

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SIDE_COLUMN = "__side"
"""The column of the operator's input saying which input a row came from: ``left`` or
``right`` (also in the side output of late records)."""

Sides = tuple[tuple[str, ...], tuple[str, ...]]
"""The columns of the left and of the right input."""


class CoProcessor(KeyedProcessor):
    """Base class of a processor of two keyed inputs (see module docs)."""

    def process(self, key: Key, rows: Any, state: KeyState) -> Output:
        """Not called: the operator calls :meth:`process_left` and :meth:`process_right`."""
        msg = f"{type(self).__name__} takes two inputs: stateful(left, ..., right=...)"
        raise NotImplementedError(msg)

    def process_left(self, key: Key, rows: Any, state: KeyState) -> Output:
        """Called once per key with rows of the left input in the batch; returns output rows."""
        msg = f"{type(self).__name__} must implement process_left(key, rows, state)"
        raise NotImplementedError(msg)

    def process_right(self, key: Key, rows: Any, state: KeyState) -> Output:
        """Called once per key with rows of the right input in the batch, after
        :meth:`process_left`; returns output rows."""
        msg = f"{type(self).__name__} must implement process_right(key, rows, state)"
        raise NotImplementedError(msg)


def union_sides(
    left: DataFrame, right: DataFrame, processor: KeyedProcessor, key: tuple[str, ...]
) -> tuple[DataFrame, Sides]:
    """The two inputs as one, each row marked by :data:`SIDE_COLUMN`, and each input's
    columns (driver side, when the operator is built)."""
    from pyspark.sql import functions as F

    if not isinstance(processor, CoProcessor):
        msg = (
            f"stateful(): right= needs a CoProcessor with process_left and process_right; "
            f"{type(processor).__name__} is not one"
        )
        raise ConfigError(msg)
    for column in key:
        if column not in right.columns:
            columns = ", ".join(right.columns)
            msg = f"stateful(): key column '{column}' is not in the right input ({columns})"
            raise ConfigError(msg)
    if SIDE_COLUMN in left.columns or SIDE_COLUMN in right.columns:
        msg = f"stateful(): input column '{SIDE_COLUMN}' is reserved by firesteel"
        raise ConfigError(msg)
    for column in set(left.columns) & set(right.columns):
        mine, theirs = left.schema[column].dataType, right.schema[column].dataType
        if mine != theirs:
            msg = (
                f"stateful(): column '{column}' is {mine.simpleString()} in the left input and "
                f"{theirs.simpleString()} in the right one; columns of both inputs that share "
                "a name must share the type (cast or rename one)"
            )
            raise ConfigError(msg)
    both = left.withColumn(SIDE_COLUMN, F.lit("left")).unionByName(
        right.withColumn(SIDE_COLUMN, F.lit("right")), allowMissingColumns=True
    )
    return both, (tuple(left.columns), tuple(right.columns))
