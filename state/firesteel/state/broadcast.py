"""Broadcast state: a second, low-volume input whose records reach every operator partition.

Flink's broadcast state (chapter 7 of the book): a rules or configuration
stream connected to a keyed stream; every parallel instance of the operator
receives every broadcast record, keeps it in a map (the broadcast state),
checkpoints it with the keyed state and, after a crash or a rescale, restores
the same map in every instance. ::

    class Limits(KeyedProcessor):
        limits = BroadcastStateDescriptor("limits", int)

        def process_broadcast(self, record, ctx):
            ctx.state(self.limits).put(record["sensor"], record["limit"])

        def process(self, key, rows, state):
            limit = state.broadcast(self.limits).get(key[0], 100)
            ...

    stateful(readings, key=["sensor"], processor=Limits(), ..., broadcast=limit_updates)

How it runs inside what PySpark allows (one ``mapInArrow`` over key-group
partitions, see :mod:`firesteel.state.operator`):

* **Delivery**: the broadcast DataFrame (a second streaming source; it must
  be resettable for exactly-once, like the keyed input) is packed into one
  JSON column and unioned into the keyed input; each of its rows is copied to
  every one of the P operator partitions by the same route the batch clock's
  tick rows take (a negative key group). Spark logs both sources' offsets in
  ``offsets/N``, so a re-run of batch N replays exactly the same broadcast
  records. Each partition applies them in one deterministic order (the
  ``broadcast_order`` column, then the record's JSON text), never in arrival
  order, which a shuffle does not keep: so every partition reaches the same map.
* **Storage**: the broadcast map is kept as map state under the reserved key
  ``()`` (no grouping key is empty) in *every key group* the partition owns,
  and written to every one of them by each update. Rescaling therefore needs
  nothing new: a partition restored from any mix of old partitions' key groups
  finds a complete copy in each, and reads its first. The snapshot, restore,
  retention and schema evolution of keyed state apply unchanged.

Costs: each broadcast record crosses the shuffle P times and is decoded P
times; each update is written to ``max_parallelism`` key groups (128 by
default) in all, so a snapshot holds the map ``max_parallelism`` times over.
That is cheap for a rules stream (hundreds of entries) and wrong for a large
table: join that instead. Output returned by ``process_broadcast`` is emitted
once per partition (P times); usually it returns nothing. Records reach the
processor as dicts of JSON values (timestamps as ISO strings).
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from firesteel.core.spi import ConfigError
from firesteel.state.api import MapState
from firesteel.state.backend import Key, KeyedStateStore
from firesteel.state.descriptors import BroadcastStateDescriptor, StateDescriptor
from firesteel.state.keygroups import KeyGroupRange

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

BROADCAST_COLUMN = "__firesteel_broadcast"
"""The column carrying a broadcast record (as JSON); null on the keyed input's rows."""
BROADCAST_KEY: Key = ()
"""The key the broadcast map is stored under in every key group."""


def broadcast_descriptors(
    declared: Mapping[str, StateDescriptor],
) -> list[BroadcastStateDescriptor]:
    """The broadcast states among a processor's declared states."""
    return [d for d in declared.values() if isinstance(d, BroadcastStateDescriptor)]


def union_input(df: DataFrame, broadcast: DataFrame, order: str | None) -> DataFrame:
    """``df`` with the records of ``broadcast`` unioned in, each packed into
    :data:`BROADCAST_COLUMN` (driver side, when the operator is built)."""
    from pyspark.sql import functions as F

    if order is not None and order not in broadcast.columns:
        msg = (
            f"stateful(): broadcast_order column '{order}' is not in the broadcast input "
            f"({', '.join(broadcast.columns)})"
        )
        raise ConfigError(msg)
    packed = broadcast.select(F.to_json(F.struct(*broadcast.columns)).alias(BROADCAST_COLUMN))
    keyed = df.withColumn(BROADCAST_COLUMN, F.lit(None).cast("string"))
    return keyed.unionByName(packed, allowMissingColumns=True)


def route(plain: Column, parallelism: int) -> Column:
    """The route column: a broadcast record goes to every partition (copies -P .. -1), any
    other row as ``plain`` says."""
    from pyspark.sql import functions as F

    every_partition = F.sequence(F.lit(-parallelism), F.lit(-1))
    return F.when(F.col(BROADCAST_COLUMN).isNotNull(), every_partition).otherwise(plain)


def records(table: pa.Table | None, order: str | None) -> list[dict[str, Any]]:
    """The broadcast records a task received, decoded, in the one order every partition uses."""
    if table is None or BROADCAST_COLUMN not in table.column_names:
        return []
    column = table.column(BROADCAST_COLUMN)
    texts = column.filter(pc.is_valid(column)).to_pylist()
    decoded = [(json.loads(text), text) for text in texts]
    if order is not None:
        decoded.sort(key=lambda item: (item[0].get(order) is None, item[0].get(order), item[1]))
    else:
        decoded.sort(key=lambda item: item[1])
    return [record for record, _ in decoded]


def without_column(table: pa.Table) -> pa.Table:
    """``table`` without :data:`BROADCAST_COLUMN` (the keyed input as the user wrote it)."""
    if BROADCAST_COLUMN in table.column_names:
        return table.drop_columns([BROADCAST_COLUMN])
    return table


class BroadcastMap:
    """The writable broadcast map ``process_broadcast`` gets: every change goes to the copy
    in each key group of the partition; reads come from the first."""

    def __init__(
        self, store: KeyedStateStore, key_groups: KeyGroupRange, descriptor: StateDescriptor
    ) -> None:
        self._store = store
        self._key_groups = key_groups
        self._descriptor = descriptor

    def _bound(self, key_group: int) -> MapState:
        """The map state, bound to the copy in ``key_group`` (until the next key switch)."""
        self._store.set_current_key(BROADCAST_KEY, key_group)
        state = self._store.state(self._descriptor)
        assert isinstance(state, MapState)
        return state

    def put(self, user_key: Any, value: Any) -> None:
        """Store one entry in every copy; ``None`` removes it."""
        for key_group in self._key_groups:
            self._bound(key_group).put(user_key, value)

    def remove(self, user_key: Any) -> None:
        """Remove one entry from every copy."""
        self.put(user_key, None)

    def clear(self) -> None:
        """Empty the map in every copy."""
        for key_group in self._key_groups:
            self._bound(key_group).clear()

    def get(self, user_key: Any, default: Any = None) -> Any:
        """The value stored under ``user_key``, or ``default``."""
        return self._bound(self._key_groups.start).get(user_key, default)

    def items(self) -> list[tuple[Any, Any]]:
        """The entries."""
        return self._bound(self._key_groups.start).items()


class BroadcastContext:
    """Given to ``process_broadcast``: the batch, the partition and the broadcast maps."""

    def __init__(
        self,
        store: KeyedStateStore,
        key_groups: KeyGroupRange,
        batch_id: int,
        partition: int,
        declared: Sequence[BroadcastStateDescriptor],
    ) -> None:
        self.batch_id = batch_id
        """The micro-batch id."""
        self.partition = partition
        """The operator partition applying the record (every partition applies each one)."""
        self.declared = tuple(declared)
        """The processor's broadcast states."""
        self._store = store
        self._key_groups = key_groups

    def state(self, descriptor: BroadcastStateDescriptor) -> BroadcastMap:
        """The writable broadcast map of ``descriptor``."""
        if descriptor not in self.declared:
            msg = (
                f"broadcast state '{descriptor.name}' is not declared; declare a "
                "BroadcastStateDescriptor as a class attribute of the processor"
            )
            raise ConfigError(msg)
        return BroadcastMap(self._store, self._key_groups, descriptor)


def apply(
    context: BroadcastContext,
    received: list[dict[str, Any]],
    call: Callable[[dict[str, Any]], None],
) -> dict[str, Mapping[Any, Any]]:
    """Apply every received record (``call`` runs ``process_broadcast`` on one), then
    return each broadcast map, read-only, for ``process`` and ``on_timer``."""
    for record in received:
        call(record)
    return {
        descriptor.name: types.MappingProxyType(dict(context.state(descriptor).items()))
        for descriptor in context.declared
    }
