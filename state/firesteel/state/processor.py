"""The processor a user writes, and the handles it gets.

::

    class RunningCount(KeyedProcessor):
        count = ValueStateDescriptor("count", int)

        def process(self, key, rows, state):
            total = (state.get(self.count).value() or 0) + rows.num_rows
            state.get(self.count).update(total)
            yield {"sensor": key[0], "count": total}

Call order, per task (one operator partition of one micro-batch):

1. ``open(ctx)`` -- before any state is restored; declare states here with
   ``ctx.declare`` if they are not class attributes.
2. ``on_timer(key, timestamp_ms, state)`` for every timer due at the batch's
   processing time, oldest first, then (with ``stateful(..., event_time=...)``) for every
   event-time timer at or behind the batch's watermark, oldest first; ``state.time_domain``
   says which -- before new input, because the time passed before the input was processed.
   An event-time timer registered in ``on_timer`` at or behind the watermark fires in the
   same batch. A processor that overrides ``on_event_timers`` gets each round of due
   event-time timers in one call instead.
3. ``process(key, rows, state)`` once per key present in the batch, keys in
   order of first appearance in the task's input (grouped by hash, not sorted);
   ``rows`` holds all of the key's rows of this batch in input order (a
   ``pyarrow.Table``, or a ``pandas.DataFrame`` with ``input_format = "pandas"``), or
   what ``prepare`` made of them: ``prepare(rows, starts, state)`` runs first, once, over
   the whole batch, when the processor overrides it.
   A processor whose ``processes_tables()`` is true gets the whole task's input in one
   ``process_table(rows, state)`` call instead of steps 2 (event time) and 3, and keeps
   its state per key group (the column form of the window operator).
4. ``close()`` -- also after a failure.

With a second keyed input (``stateful(..., right=df)``), a
:class:`~firesteel.state.coprocess.CoProcessor` gets ``process_left`` then ``process_right``
in place of ``process`` in step 3. With a broadcast input (``stateful(..., broadcast=df)``),
``process_broadcast(record, ctx)`` runs first, in every partition, for each broadcast record
of the batch (see :mod:`firesteel.state.broadcast`).

``process`` and ``on_timer`` return output rows: an iterable of dicts (or
tuples in output-schema order), a ``pyarrow.Table``/``RecordBatch``, a
``pandas.DataFrame``, or None.

Traps: the processor object is rebuilt in every task, so keep everything that
must survive a batch in state, never in attributes. Processing time is the
batch's time (the same when a batch re-runs), not the wall clock at the call.
"""

from __future__ import annotations

import builtins
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast

import pyarrow as pa

from firesteel.core.spi import ConfigError
from firesteel.core.toolkit import MILLIS, to_epoch
from firesteel.state.api import ListState, MapState, ValueState
from firesteel.state.backend import Key, KeyedStateStore
from firesteel.state.clock import CLOCK_KEY as GROUP_KEY
from firesteel.state.descriptors import (
    BroadcastStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from firesteel.state.keygroups import KeyGroupRange

if TYPE_CHECKING:
    from firesteel.state.broadcast import BroadcastContext
    from firesteel.state.combine import Combiner
    from firesteel.state.eventtime import EventTime, EventTimers, TimeDomain

Output = Iterable[Any] | Any | None
"""What ``process`` and ``on_timer`` may return (see module docs)."""


class OpenContext:
    """Given to ``open``: where the processor runs, and how to declare state."""

    def __init__(
        self,
        operator: str,
        batch_id: int,
        partition: int,
        declared: dict[str, StateDescriptor],
        *,
        key_columns: tuple[str, ...] = (),
        event_time_column: str | None = None,
    ) -> None:
        self.operator = operator
        """The operator's name."""
        self.batch_id = batch_id
        """The micro-batch (= checkpoint) id this task processes."""
        self.partition = partition
        """The operator partition this task runs."""
        self.key_columns = key_columns
        """The operator's key columns, in the order of the key tuples."""
        self.event_time_column = event_time_column
        """The ``event_time`` column given to ``stateful``, or None without event time."""
        self._declared = declared
        self.dropped: list[str] = []

    def require_event_time(self, who: str, column: str = "<column>") -> str:
        """The ``event_time`` column; a :class:`ConfigError` naming ``who`` (a processor that
        works on event time) and showing the arguments when ``stateful`` was given none."""
        if self.event_time_column is None:
            msg = (
                f"operator '{self.operator}': {who} needs event time: stateful(..., "
                f"event_time='{column}', watermark=BoundedOutOfOrderness(...))"
            )
            raise ConfigError(msg)
        return self.event_time_column

    def declare(self, descriptor: StateDescriptor) -> StateDescriptor:
        """Declare a state (class-attribute descriptors are declared already)."""
        known = self._declared.get(descriptor.name)
        if known is not None and known != descriptor:
            msg = (
                f"operator '{self.operator}': state '{descriptor.name}' declared twice, differently"
            )
            raise ConfigError(msg)
        self._declared[descriptor.name] = descriptor
        return descriptor

    def drop_state(self, name: str) -> None:
        """Discard state ``name`` found in snapshots (a state the processor no longer uses)."""
        self.dropped.append(name)


class KeyState:
    """The ``state`` handle given to ``process`` and ``on_timer``: the current key's state."""

    def __init__(self, store: KeyedStateStore, operator: str, batch_id: int) -> None:
        self._store = store
        self.operator = operator
        """The operator's name."""
        self.batch_id = batch_id
        """The micro-batch id."""
        self.key: Key = ()
        """The current key (a tuple of the key columns' values)."""
        self.broadcast_maps: Mapping[str, Mapping[Any, Any]] = {}
        """The broadcast maps of this batch, read-only, by state name."""
        self.time_domain: TimeDomain | None = None
        """Inside ``on_timer``: the time domain of the firing timer; None in ``process``."""
        self.watermark_ms: int | None = None
        """The batch's event-time watermark (epoch ms): no record at or behind it is still
        to come. None without ``event_time`` or before the first event."""
        self.key_group = 0
        """The current key's key group."""
        self.event_timers: EventTimers | None = None
        """The task's event-time timers (set by the operator when it has ``event_time``)."""
        self.rejected_late: builtins.list[pa.Table] = []
        """Late records ``emit_late`` handed back, until the operator routes them."""
        self.key_groups: KeyGroupRange = KeyGroupRange(0, -1)
        """The key groups this task owns."""

    def broadcast(self, descriptor: BroadcastStateDescriptor) -> Mapping[Any, Any]:
        """The broadcast map of ``descriptor`` (read-only; ``process_broadcast`` writes it)."""
        found = self.broadcast_maps.get(descriptor.name)
        if found is None:
            msg = (
                f"operator '{self.operator}': broadcast state '{descriptor.name}' is not "
                "declared, or the operator has no broadcast input (stateful(broadcast=...))"
            )
            raise ConfigError(msg)
        return found

    @property
    def processing_time_ms(self) -> int:
        """The batch's processing time in epoch milliseconds."""
        return self._store.now_ms

    @property
    def processing_time(self) -> dt.datetime:
        """The batch's processing time as an aware UTC datetime."""
        return dt.datetime.fromtimestamp(self._store.now_ms / 1000, tz=dt.timezone.utc)

    def get(self, descriptor: StateDescriptor) -> Any:
        """The state object for ``descriptor`` (a ValueState, ListState or MapState)."""
        return self._store.state(descriptor)

    def value(self, descriptor: ValueStateDescriptor) -> ValueState:
        """The :class:`ValueState` for ``descriptor``."""
        return cast(ValueState, self._store.state(descriptor))

    def list(self, descriptor: ListStateDescriptor) -> ListState:
        """The :class:`ListState` for ``descriptor``."""
        return cast(ListState, self._store.state(descriptor))

    def map(self, descriptor: MapStateDescriptor) -> MapState:
        """The :class:`MapState` for ``descriptor``."""
        return cast(MapState, self._store.state(descriptor))

    def register_timer(self, when: dt.datetime | int | float) -> None:
        """Fire ``on_timer`` for this key in the first batch whose time is ``>= when``.

        ``when`` is a datetime or epoch milliseconds. Registering the same time
        twice gives one timer. Timers are part of the snapshot.
        """
        self._store.register_timer(to_epoch(when, MILLIS))

    def delete_timer(self, when: dt.datetime | int | float) -> None:
        """Remove a timer of this key (no error when absent)."""
        self._store.delete_timer(to_epoch(when, MILLIS))

    def timers(self) -> builtins.list[int]:
        """This key's pending timers (epoch milliseconds, ascending)."""
        return self._store.timers()

    def select_key(self, key: Key, key_group: int) -> None:
        """Make ``key`` (of ``key_group``) the current key: only inside ``on_event_timers``,
        for the keys of its timers."""
        self._store.set_current_key(key, key_group)
        self.key = key
        self.key_group = key_group

    def group_value(self, descriptor: ValueStateDescriptor, key_group: int) -> Any:
        """The value of ``descriptor`` kept for a whole key group of the task (not for a
        key), or None: for a processor that keeps a key group's state as one value
        (``process_table``). Leaves no key current."""
        self._store.set_current_key(GROUP_KEY, key_group)
        return cast(ValueState, self._store.state(descriptor)).value()

    def set_group_value(self, descriptor: ValueStateDescriptor, key_group: int, value: Any) -> None:
        """Set (None: clear) the value of ``descriptor`` kept for a whole key group."""
        self._store.set_current_key(GROUP_KEY, key_group)
        state = cast(ValueState, self._store.state(descriptor))
        if value is None:
            state.clear()
        else:
            state.update(value)

    def _event_timers(self) -> EventTimers:
        if self.event_timers is None:
            msg = (
                f"operator '{self.operator}': event-time timers need an event-time column: "
                "stateful(..., event_time='<column>', watermark=BoundedOutOfOrderness(...))"
            )
            raise ConfigError(msg)
        return self.event_timers

    def register_event_time_timer(self, when: dt.datetime | int | float) -> None:
        """Fire ``on_timer`` for this key (``time_domain`` EVENT_TIME) in the first batch whose
        watermark is at or past ``when`` (a datetime or epoch milliseconds), before that
        batch's input. Registering the same time twice gives one timer. Timers are part of
        the key group's state."""
        self._event_timers().register(self.key_group, self.key, to_epoch(when, MILLIS))

    def delete_event_time_timer(self, when: dt.datetime | int | float) -> None:
        """Remove an event-time timer of this key (no error when absent)."""
        self._event_timers().delete(self.key_group, self.key, to_epoch(when, MILLIS))

    def event_time_timers(self) -> builtins.list[int]:
        """This key's pending event-time timers (epoch milliseconds, ascending)."""
        return self._event_timers().of_key(self.key_group, self.key)

    def emit_late(self, rows: pa.Table) -> None:
        """Send records of ``rows`` (a ``pyarrow.Table`` slice of what ``process`` received)
        where the operator's ``late`` policy sends late records: the side output by default,
        or dropped and counted. For processors with ``handles_late = True``, which decide
        themselves which late records they can still use (a window within its allowed
        lateness)."""
        if rows.num_rows:
            self.rejected_late.append(rows)


class KeyedProcessor:
    """Base class of a stateful processor (see module docs for the call order).

    Class attributes that are state descriptors are declared automatically.
    """

    input_format: ClassVar[Literal["arrow", "pandas"]] = "arrow"
    """How ``process`` receives a key's rows."""

    handles_late: ClassVar[bool] = False
    """True: ``process`` also receives the records at or behind the watermark (without a
    ``__late`` column) and hands those it cannot use to ``state.emit_late``, which routes
    them by the operator's ``late`` policy (``side-output`` or ``drop``; ``process`` is
    refused). The window processors of :mod:`firesteel.state.windows` work this way."""

    def open(self, ctx: OpenContext) -> None:
        """Called once per task before anything else."""

    def prepare(
        self, rows: pa.Table, starts: Sequence[int], state: KeyState
    ) -> Sequence[Any] | None:
        """Called once per task, after the timers and before the first ``process``, with
        every input record of the batch grouped by key: key ``i``'s rows, in input order,
        start at row ``starts[i]`` (and end where key ``i + 1``'s start), keys in the order
        ``process`` is called. Returns one item per key, which ``process`` receives in place
        of the key's rows, or None (the default): ``process`` gets the rows.

        For work done once per batch rather than once per key, vectorized (Flink's
        mini-batch pre-aggregation): the window operator folds a batch's records into one
        partial accumulator per key and window here. ``state`` has the batch's watermark
        and processing time but no current key: read no keyed state here. Not called with
        ``input_format = "pandas"`` or a right input."""
        return None

    def combiner(self, key_columns: tuple[str, ...], event_time: EventTime) -> Combiner | None:
        """Called once, when :func:`~firesteel.state.stateful` builds the plan, for an
        operator in event time: a map-side combine (:mod:`firesteel.state.combine`) whose
        rows ``process`` (through ``prepare``) folds exactly as the records they stand for,
        or None (the default): the records themselves are shuffled."""
        return None

    def process(self, key: Key, rows: Any, state: KeyState) -> Output:
        """Called once per key present in the batch; returns output rows."""
        msg = f"{type(self).__name__} must implement process(key, rows, state)"
        raise NotImplementedError(msg)

    def on_timer(self, key: Key, timestamp_ms: int, state: KeyState) -> Output:
        """Called for each due timer of ``key`` (``state.time_domain`` says which clock);
        returns output rows."""
        return None

    def processes_tables(self) -> bool:
        """True when the processor takes each task's input whole through ``process_table``
        in place of ``prepare``, ``process`` and event-time timers (False by default)."""
        return False

    def process_table(self, rows: pa.Table | None, state: KeyState) -> Output:
        """Called, for a processor whose ``processes_tables()`` is true, once per task after
        the processing-time timers, also when the task got no records (``rows`` None: the
        watermark may have moved): every record of the batch, with its key group in the
        column ``firesteel.state.keygroups.KEY_GROUP_COLUMN``. Its state is kept per key
        group (``state.group_value`` / ``state.set_group_value`` for each of
        ``state.key_groups``); records it cannot use go to ``state.emit_late`` with that
        column. Returns the output rows. For processors whose whole batch is vectorized work
        (windows with an Arrow aggregate, :mod:`firesteel.state.window_table`)."""
        return None

    def on_event_timers(self, timers: Sequence[tuple[int, int, Key]], state: KeyState) -> Output:
        """Called, when a processor overrides it, in place of ``on_timer`` for event-time
        timers: once per round of due timers, with every ``(timestamp, key_group, key)`` of
        the round in firing order (timestamp, then key group, then key as registered). It
        makes each key current with ``state.select_key(key, key_group)`` before touching its
        state, and returns the output rows of the whole round (a ``pyarrow.Table`` saves a
        conversion per row). Timers it registers at or behind the watermark come in the
        next round of the same batch. For processors that fire many timers a batch, done
        once per round rather than once per timer (the window operator's due windows)."""
        return None

    def process_broadcast(self, record: dict[str, Any], ctx: BroadcastContext) -> Output:
        """Called in every partition for each record of the broadcast input, before timers
        and keys; writes broadcast state through ``ctx.state(descriptor)``. Output rows it
        returns are emitted by every partition."""
        msg = (
            f"{type(self).__name__} must implement process_broadcast(record, ctx) to take "
            "a broadcast input"
        )
        raise NotImplementedError(msg)

    def close(self) -> None:
        """Called once per task after everything else, also after a failure."""

    def declared_states(self) -> dict[str, StateDescriptor]:
        """The descriptors declared as class attributes, by name."""
        found: dict[str, StateDescriptor] = {}
        for klass in reversed(type(self).__mro__):
            for value in vars(klass).values():
                if isinstance(value, StateDescriptor):
                    found[value.name] = value
        return found
