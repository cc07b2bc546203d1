"""The stateful operator: keyed state inside a Structured Streaming plan.

:func:`stateful` builds, from a streaming DataFrame::

    df
      .withColumn(route = explode(first row of an input task ? [-P .. 0] : [0]))  # Arrow UDF
      .withColumn(key group = route < 0 ? route : pmod(hash(key columns), max_parallelism))
      .withColumn(batch time = current_timestamp())                       # fixed per batch
      .repartitionById(P, key group < 0 ? -key group - 1 : key group * P div max_parallelism)
      .mapInArrow(<one operator task per partition>, output_schema)

Operator partition p owns the key groups of Flink's range for p, so after a
restart with another ``parallelism`` each key group, with its state, simply
moves to the partition that now owns it.

One operator task (one partition of micro-batch N), in order:

1. read N and the query id from ``TaskContext`` (``streaming.sql.batchId``);
2. ``processor.open``; restore the task's key groups to version N-1 (see
   :mod:`firesteel.backends.heap.store` for why that is exactly the committed state);
3. fire due timers, then call ``process`` per key (keys in order of first appearance), turning
   output into Arrow batches of the output schema as it goes;
4. snapshot version N in a background thread while the last output batches
   are handed to Spark, and return only once the snapshot is durable, so batch
   N cannot commit without its state; then fault point ``state.after_snapshot``.

Any failure -- the processor raising, output not matching the schema, a
corrupt snapshot -- fails the task before its snapshot exists and drops the
task's in-memory changes; Spark then fails or retries the batch, and a re-run
restores version N-1 again. Nothing is half-written: a failed attempt's
snapshot of N, if any, is replaced by the re-run's.

Processing time of batch N is Spark's batch timestamp (``current_timestamp()``
of that batch, kept in the offsets log, so a re-run sees the same), or the
processing time of N-1 if that is later (a wall clock set back; see
:mod:`firesteel.state.clock`), and it
must reach every operator partition, also one whose keys got no records in N,
or its timers would fire on another clock in a re-run. So the first row of
every input task is copied once to each of the P partitions (the ``route``
column; a negative key group marks a copy): P tick rows per input task,
dropped before ``process``. When the whole batch has no rows (a Kafka range of
transaction markers only) no task has a time to use: no time passes, and
timers wait for the next batch with rows, which keeps re-runs identical.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from firesteel.core.errors import ProcessorError
from firesteel.core.faults import fault_point
from firesteel.core.metrics.task import SNAPSHOT_BLOCKED_SECONDS, hand_over
from firesteel.core.spi import ConfigError, FiresteelError, TaskScope
from firesteel.core.storage import session_settings
from firesteel.state import broadcast as broadcasts
from firesteel.state import clock, coprocess, keygroups, nogc
from firesteel.state import eventtime as et
from firesteel.state.backend import (
    KeyedStateStore,
    KeyedTask,
    OperatorSpec,
    StateBackend,
)
from firesteel.state.descriptors import StateDescriptor
from firesteel.state.keygroups import KeyGroupRange
from firesteel.state.output import OutputBuilder
from firesteel.state.processor import KeyedProcessor, KeyState, OpenContext
from firesteel.state.savepoint.restore import SavepointRestore, declarations

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from firesteel.state.combine import Combiner

logger = logging.getLogger(__name__)

AFTER_SNAPSHOT = fault_point(
    "state.after_snapshot", "a task wrote its keyed-state snapshot, before the batch committed"
)

KEY_GROUP_COLUMN = keygroups.KEY_GROUP_COLUMN
ROUTE_COLUMN = "__firesteel_route"
BATCH_TIME_COLUMN = "__firesteel_batch_time"
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")


def _default_name(processor: KeyedProcessor) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", type(processor).__name__).lower()


def _arrow_schema(df: DataFrame, output_schema: StructType | str) -> tuple[StructType, pa.Schema]:
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    if isinstance(output_schema, str):
        parsed = df.sparkSession.createDataFrame([], output_schema).schema
    elif isinstance(output_schema, StructType):
        parsed = output_schema
    else:
        given = type(output_schema).__name__
        msg = f"output_schema must be a StructType or a DDL string, got {given}"
        raise ConfigError(msg)
    # Spark hands Python timestamps as instants; Arrow needs a zone to spell them (UTC).
    return parsed, to_arrow_schema(parsed, timezone="UTC")


def stateful(
    df: DataFrame,
    key: str | Sequence[str],
    processor: KeyedProcessor,
    output_schema: StructType | str,
    backend: StateBackend,
    *,
    name: str | None = None,
    parallelism: int | None = None,
    max_parallelism: int = keygroups.DEFAULT_MAX_PARALLELISM,
    restore_from: str | SavepointRestore | None = None,
    broadcast: DataFrame | None = None,
    broadcast_order: str | None = None,
    event_time: str | None = None,
    watermark: et.BoundedOutOfOrderness | None = None,
    late: et.LatePolicy = "side-output",
    right: DataFrame | None = None,
    metrics: bool = True,
) -> DataFrame:
    """Run ``processor`` per key of ``df`` with keyed state in ``backend``.

    ``key``: the key column(s); the processor sees keys as tuples of their
    values. ``name``: the operator's identity in the backend (default: from the
    processor's class); keep it stable across restarts and unique per query.
    ``parallelism``: operator partitions; by default the parallelism the
    operator's newest snapshot was written with (as Spark pins its own shuffle
    partitions in the checkpoint), else ``spark.sql.shuffle.partitions``; an
    explicit value may change between restarts. ``max_parallelism``: number of key groups,
    fixed for the life of the state. ``restore_from``: a savepoint (its path, or a
    :class:`~firesteel.state.savepoint.SavepointRestore` with storage settings or
    ``allow_non_restored_state``) the operator's state starts from, on any backend and
    at any parallelism (see :mod:`firesteel.state.savepoint.restore`). ``broadcast``: a
    second streaming DataFrame (rules, configuration) whose records every partition gets,
    in order of the column ``broadcast_order`` (see :mod:`firesteel.state.broadcast`).

    ``event_time``: a timestamp column of ``df``, with ``watermark`` (a
    :class:`~firesteel.state.eventtime.BoundedOutOfOrderness`): gives the processor
    ``state.watermark_ms`` and event-time timers, and makes records at or behind the
    watermark late (see :mod:`firesteel.state.eventtime`). ``late`` says what becomes of
    them: ``"side-output"`` (default) adds a column ``__late`` to the result, a struct of
    the input's columns holding one late record per row (its other columns null; null on
    every other row), so one query, hence one pass over state, yields both outputs: split
    them with :func:`~firesteel.state.eventtime.main_output` and
    :func:`~firesteel.state.eventtime.late_output` (in ``foreachBatch``, each to its sink);
    ``"drop"`` drops and counts them; ``"process"`` hands them to ``process`` with a boolean
    column ``__late`` true. Spark's own ``withWatermark`` on ``df`` is refused: its
    watermark serves Spark's operators, and two watermarks would disagree on what is late.

    ``right``: a second keyed input (the same key columns) for a
    :class:`~firesteel.state.coprocess.CoProcessor`, whose ``process_left`` gets ``df``'s
    rows and ``process_right`` this one's, sharing the key's state and timers (see
    :mod:`firesteel.state.coprocess`).

    ``metrics``: each task hands its snapshot's figures (seconds, bytes written, the
    state's size as the backend knows it) to the sink's task after it, for the batch's
    record (:func:`firesteel.core.metrics.task.hand_over`); ``False`` skips that.

    The result is a streaming DataFrame of ``output_schema``: write it with any
    sink. State is exactly-once with any sink (a batch's state commits with the
    batch); the output is as good as the sink (use ``firesteel.files`` with
    ``guarantee=exactly-once`` for exactly-once output).
    """
    from pyspark.sql import functions as F

    key_columns = (key,) if isinstance(key, str) else tuple(key)
    if not key_columns:
        msg = "stateful(): give at least one key column"
        raise ConfigError(msg)
    missing = [c for c in key_columns if c not in df.columns]
    if missing:
        msg = f"stateful(): key column '{missing[0]}' is not in the input ({', '.join(df.columns)})"
        raise ConfigError(msg)
    reserved = {KEY_GROUP_COLUMN, BATCH_TIME_COLUMN, ROUTE_COLUMN, broadcasts.BROADCAST_COLUMN}
    if event_time is not None:
        reserved |= {et.TICK_COLUMN, et.FIRST_ROW_COLUMN, et.LATE_COLUMN, et.COMBINED_COLUMN}
    clash = reserved & set(df.columns)
    if clash:
        msg = f"stateful(): input column '{sorted(clash)[0]}' is reserved by firesteel"
        raise ConfigError(msg)
    if not callable(getattr(processor, "process", None)):
        msg = f"stateful(): processor {processor!r} has no process(key, rows, state) method"
        raise ConfigError(msg)
    operator = name or _default_name(processor)
    if not _NAME.match(operator):
        msg = f"stateful(): operator name {operator!r}: use letters, digits, '_', '-' or '.'"
        raise ConfigError(msg)
    backend = backend.with_session(session_settings(df.sparkSession))
    backend.validate()
    if parallelism is None:
        # Like Spark's own stateful operators, keep the partitioning the state was
        # written with rather than follow a session setting changed since.
        parallelism = backend.recorded_parallelism(operator) or int(
            df.sparkSession.conf.get("spark.sql.shuffle.partitions") or "200"
        )
    keygroups.validate(parallelism, max_parallelism)
    sides: coprocess.Sides | None = None
    if right is not None:
        if broadcast is not None:
            msg = "stateful(): a broadcast input and a right input together are not supported"
            raise ConfigError(msg)
        if event_time is not None and event_time not in right.columns:
            columns = ", ".join(right.columns)
            msg = (
                f"stateful(): event_time column '{event_time}' is not in the right input "
                f"({columns})"
            )
            raise ConfigError(msg)
        df, sides = coprocess.union_sides(df, right, processor, key_columns)
    elif isinstance(processor, coprocess.CoProcessor):
        msg = f"stateful(): {type(processor).__name__} takes two inputs: give right=<DataFrame>"
        raise ConfigError(msg)
    times = _event_time(df, event_time, watermark, late)
    if getattr(processor, "handles_late", False):
        if times is None:
            msg = (
                f"stateful(): {type(processor).__name__} works in event time: give "
                "event_time='<timestamp column>' and watermark=BoundedOutOfOrderness(...)"
            )
            raise ConfigError(msg)
        if times.late == "process":
            msg = (
                f"stateful(): {type(processor).__name__} decides itself which late records "
                "it can use; late='process' does not apply: use 'side-output' or 'drop'"
            )
            raise ConfigError(msg)
    input_schema = df.schema
    if times is not None:
        df = _with_ticks(df, times.column, processor.combiner(key_columns, times))
    if broadcast is not None:
        if type(processor).process_broadcast is KeyedProcessor.process_broadcast:
            msg = f"stateful(): {type(processor).__name__} has no process_broadcast(record, ctx)"
            raise ConfigError(msg)
        df = broadcasts.union_input(df, broadcast, broadcast_order)
    spark_schema, arrow_schema = _arrow_schema(df, output_schema)
    late_type: pa.DataType | None = None
    if times is not None and times.late == "side-output":
        spark_schema, late_type = _with_late_column(spark_schema, input_schema)
    spec = OperatorSpec(operator, key_columns, max_parallelism, parallelism)
    restore = SavepointRestore(restore_from) if isinstance(restore_from, str) else restore_from
    if restore is not None:
        restore = restore.check(spec, processor.declared_states().values())
        restore.claim(df.sparkSession, operator)

    key_group = keygroups.key_group_column(key_columns, max_parallelism)
    # With event time the ticks' pass over the input flags each task's first row already.
    first_of_task = (
        _first_row_of_task()(F.spark_partition_id())
        if times is None
        else F.col(et.FIRST_ROW_COLUMN)
    )
    route = F.when(first_of_task, F.sequence(F.lit(-parallelism), F.lit(0))).otherwise(
        F.array(F.lit(0))
    )
    if broadcast is not None:
        route = broadcasts.route(route, parallelism)
    if times is not None:
        every_partition = F.sequence(F.lit(-parallelism), F.lit(-1))
        route = F.when(F.col(et.TICK_COLUMN).isNotNull(), every_partition).otherwise(route)
    routed = F.col(ROUTE_COLUMN)
    group = F.col(KEY_GROUP_COLUMN)
    partition = F.when(group < 0, -group - 1).otherwise(
        F.floor(group * parallelism / max_parallelism)
    )
    staged = (
        df.withColumn(ROUTE_COLUMN, F.explode(route))
        .withColumn(KEY_GROUP_COLUMN, F.when(routed < 0, routed).otherwise(key_group).cast("int"))
        .drop(ROUTE_COLUMN, et.FIRST_ROW_COLUMN)
        .withColumn(BATCH_TIME_COLUMN, F.current_timestamp())
        .repartitionById(parallelism, partition.cast("int"))
    )
    task = OperatorTask(
        spec,
        processor,
        backend,
        arrow_schema,
        restore,
        broadcast_order,
        times,
        late_type,
        sides,
        report_metrics=metrics,
    )
    backend.on_built(df.sparkSession, operator)
    logger.info(
        "firesteel: stateful operator %s on %s, %d partitions over %d key groups, %s backend at %s",
        operator,
        list(key_columns),
        parallelism,
        max_parallelism,
        backend.name,
        backend.location,
    )
    return staged.mapInArrow(task, spark_schema)


def _event_time(
    df: DataFrame, column: str | None, watermark: et.BoundedOutOfOrderness | None, late: str
) -> et.EventTime | None:
    """The operator's event-time settings, checked against the input."""
    from pyspark.sql.types import TimestampNTZType, TimestampType

    if column is None:
        if watermark is not None:
            msg = "stateful(): watermark= needs event_time='<timestamp column>'"
            raise ConfigError(msg)
        return None
    if watermark is None:
        msg = (
            f"stateful(): event_time='{column}' needs a watermark strategy, e.g. "
            "watermark=BoundedOutOfOrderness(datetime.timedelta(seconds=10))"
        )
        raise ConfigError(msg)
    if column not in df.columns:
        columns = ", ".join(df.columns)
        msg = f"stateful(): event_time column '{column}' is not in the input ({columns})"
        raise ConfigError(msg)
    kind = df.schema[column].dataType
    if not isinstance(kind, TimestampType | TimestampNTZType):
        msg = (
            f"stateful(): event_time column '{column}' is {kind.simpleString()}; "
            "it must be a timestamp (cast it, e.g. F.col(c).cast('timestamp'))"
        )
        raise ConfigError(msg)
    if "EventTimeWatermark" in _plans(df):
        msg = (
            "stateful(): the input has Spark's withWatermark; firesteel derives its own "
            "watermark from event_time= and watermark=: remove withWatermark"
        )
        raise ConfigError(msg)
    return et.EventTime(column, watermark, cast(et.LatePolicy, late))


def _plans(df: DataFrame) -> str:
    """The plans of ``df`` as ``explain(extended=True)`` prints them: the one way to see
    them both in a classic session and from a Spark Connect client (which has no JVM
    handle on the DataFrame)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        df.explain(extended=True)
    return printed.getvalue()


def _nullable(schema: StructType) -> StructType:
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(f.name, f.dataType, True, f.metadata) for f in schema])


def _with_ticks(df: DataFrame, column: str, combine: Combiner | None) -> DataFrame:
    """``df`` with the tick rows of :class:`~firesteel.state.eventtime.EventTimeTicks`, its
    records combined by ``combine`` where that applies to ``df``'s columns."""
    from pyspark.sql.types import BooleanType, LongType, StructField

    given = _nullable(df.schema)
    schema = given if combine is None else _combined_schema(given, combine)
    if schema is None:
        schema, combine = given, None
    elif combine is not None:
        # Only the columns the combine reads cross from the JVM to the map side's worker.
        df = df.select(*combine.input_columns())
    schema = schema.add(StructField(et.TICK_COLUMN, LongType(), True))
    schema = schema.add(StructField(et.FIRST_ROW_COLUMN, BooleanType(), True))
    return df.mapInArrow(et.EventTimeTicks(column, combine), schema)


def _combined_schema(given: StructType, combine: Combiner) -> StructType | None:
    """The Spark schema of ``combine``'s rows from input rows of ``given``, or None where the
    combine does not apply to them."""
    from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema
    from pyspark.sql.types import StructField, StructType

    combined = combine.output_schema(to_arrow_schema(given, timezone="UTC"))
    if combined is None:
        return None
    fields = []
    for field in combined:
        if field.name in given.fieldNames():
            fields.append(given[field.name])
            continue
        try:
            kind = from_arrow_type(field.type)
        except TypeError:
            return None
        fields.append(StructField(field.name, kind, True))
    return StructType(fields)


def _with_late_column(output: StructType, given: StructType) -> tuple[StructType, pa.DataType]:
    """The result's schema with the side output column, and that column's Arrow type."""
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import StructField

    late = _nullable(given)
    schema = _nullable(output).add(StructField(et.LATE_COLUMN, late, True))
    return schema, to_arrow_type(late, timezone="UTC")


_routed_task: dict[str, int | None] = {"attempt": None}
"""The task attempt whose first row was flagged (a Python worker runs one task at a time)."""


def first_row_of_task(column: pa.Array) -> pa.Array:
    """Flags the first row a Spark task evaluates (``monotonically_increasing_id`` is
    refused in streaming plans, so this is a tiny Arrow UDF over one int column)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    attempt = context.taskAttemptId() if context is not None else None
    flags = np.zeros(len(column), dtype=bool)
    if len(flags) and attempt != _routed_task["attempt"]:
        flags[0] = True
        _routed_task["attempt"] = attempt
    return pa.array(flags, pa.bool_())


def _first_row_of_task() -> Any:
    from pyspark.sql.functions import arrow_udf

    # PySpark's stubs only type the form with functionType, which warns at run time.
    make: Any = arrow_udf
    return make(first_row_of_task, "boolean")


@dataclass
class OperatorTask:
    """The picklable function Spark runs per partition (``mapInArrow``)."""

    spec: OperatorSpec
    processor: KeyedProcessor
    backend: StateBackend
    schema: pa.Schema
    restore: SavepointRestore | None = None
    broadcast_order: str | None = None
    event_time: et.EventTime | None = None
    late_type: pa.DataType | None = None
    """The Arrow type of the ``__late`` column with ``late="side-output"``."""
    sides: coprocess.Sides | None = None
    """With a right input: the columns of each input (:mod:`firesteel.state.coprocess`)."""
    report_metrics: bool = True
    """Hand the snapshot's figures to the sink's task (:func:`stateful`'s ``metrics``)."""

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        scope = TaskScope.running()
        if scope is None:
            msg = (
                f"operator '{self.spec.name}': the stateful operator runs only inside a "
                "streaming query (no 'streaming.sql.batchId' in this task); use writeStream"
            )
            raise ConfigError(msg)
        task = KeyedTask(
            scope=scope,
            key_groups=KeyGroupRange.for_partition(
                scope.partition_id, self.spec.parallelism, self.spec.max_parallelism
            ),
        )
        return run_task(self, task, batches)


def _input_table(batches: Iterator[pa.RecordBatch]) -> pa.Table | None:
    collected = [b for b in batches if b.num_rows]
    return pa.Table.from_batches(collected) if collected else None


def _batch_time_ms(table: pa.Table | None) -> int | None:
    """Spark's batch timestamp, carried by every row (tick rows included); None without rows."""
    if table is None:
        return None
    latest = pc.max(table.column(BATCH_TIME_COLUMN).cast(pa.timestamp("ms")).cast(pa.int64()))
    return int(latest.as_py()) if latest.is_valid else None


def _records(table: pa.Table | None) -> pa.Table | None:
    """The input without tick rows (negative key group), or None if only ticks came."""
    if table is None:
        return None
    records = table.filter(pc.greater_equal(table.column(KEY_GROUP_COLUMN), 0))
    if et.TICK_COLUMN in records.column_names:
        records = records.drop_columns([et.TICK_COLUMN])
    return broadcasts.without_column(records) if records.num_rows else None


_ROW_INDEX = "__firesteel_row__"


def _key_runs(table: pa.Table, key_columns: Sequence[str]) -> tuple[pa.Table, list[int]]:
    """The table with each key's rows together, and the row index where each key's run starts.

    Hash grouping (Arrow's ``hash_list`` of row indices), not a sort: linear,
    and 2-4x faster than sorting string keys at 400k rows. Rows of one key keep
    their input order; keys come in order of first appearance. Nulls are one
    key, and so are NaNs.
    """
    rows = table.num_rows
    indexed = table.select(list(key_columns)).append_column(
        _ROW_INDEX, pa.array(np.arange(rows, dtype=np.int64))
    )
    groups = indexed.group_by(list(key_columns), use_threads=False).aggregate(
        [(_ROW_INDEX, "list")]
    )
    lists = groups.column(f"{_ROW_INDEX}_list")
    ordered = table.take(pc.list_flatten(lists))
    lengths = np.asarray(pc.list_value_length(lists).to_numpy(zero_copy_only=False))
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])) if len(lengths) else np.zeros(1)
    return ordered, [int(i) for i in starts]


def run_task(
    operator: OperatorTask, task: KeyedTask, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """One operator task (see module docs). A generator: Spark pulls the output.

    Python's cyclic garbage collector is paused while the task runs, and the objects left
    after it are frozen, so no collection walks the state the worker holds again and again
    (see :mod:`firesteel.state.nogc`).
    """
    with nogc.operator_task():
        yield from _run_task(operator, task, batches)


def _run_task(
    operator: OperatorTask, task: KeyedTask, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    spec = operator.spec
    received = _input_table(batches)
    batch_time = _batch_time_ms(received)
    table = _records(received)
    now_ms = 0 if batch_time is None else batch_time
    processor = operator.processor
    declared = dict(processor.declared_states())
    open_ctx = OpenContext(
        spec.name,
        task.scope.batch_id,
        task.scope.partition_id,
        declared,
        key_columns=spec.key_columns,
        event_time_column=None if operator.event_time is None else operator.event_time.column,
    )
    store: KeyedStateStore | None = None
    pending = None
    try:
        processor.open(open_ctx)
        reserved = [clock.CLOCK, et.MAX_EVENT_TIME, et.EVENT_TIMERS, et.LATE_DROPPED]
        states = declarations(operator.restore, [*declared.values(), *reserved], open_ctx.dropped)
        store = operator.backend.open_store(spec, task, states, now_ms)
        if operator.restore is not None:
            operator.restore.apply(store, spec, task, states)
        if batch_time is not None:
            now_ms = clock.advance(store, task.key_groups, batch_time)
        builder = OutputBuilder(operator.schema, spec.name, task.scope.batch_id)
        handle = KeyState(store, spec.name, task.scope.batch_id)
        handle.key_groups = task.key_groups
        times = operator.event_time
        if times is not None:
            handle.watermark_ms = et.advance(
                store, task.key_groups, times.strategy, et.batch_max_event_time(received)
            )
            handle.event_timers = et.EventTimers(store, task.key_groups)
        main = _MainOutput(builder, operator.late_type)
        handle.broadcast_maps = _apply_broadcast(
            operator, store, task, handle, builder=builder, received=received, states=declared
        )
        yield from main.drain()
        due = store.pop_due_timers(now_ms) if batch_time is not None else []
        handle.time_domain = et.TimeDomain.PROCESSING_TIME
        yield from _fire(processor, store, handle, main, due)
        if processor.processes_tables():
            handle.time_domain = None
            yield from _process_table(operator, store, handle, main, table=table, task=task)
        elif handle.event_timers is not None and handle.watermark_ms is not None:
            handle.time_domain = et.TimeDomain.EVENT_TIME
            # A timer that on_timer registers at or behind the watermark fires now too.
            batched = type(processor).on_event_timers is not KeyedProcessor.on_event_timers
            while due := handle.event_timers.pop_due(handle.watermark_ms):
                if batched:
                    _call(
                        _round, (), (processor, due), handle, main.builder, what="on_event_timers"
                    )
                    yield from main.drain()
                else:
                    yield from _fire(processor, store, handle, main, due)
        if not processor.processes_tables() and table is not None:
            handle.time_domain = None
            yield from _process_input(operator, store, handle, main, table=table, task=task)
        if handle.event_timers is not None:
            handle.event_timers.save()
        builder.flush()
        started = time.perf_counter()
        pending = store.snapshot()
        # The sink's task waits for the snapshot only outside the drain, which it consumes:
        # that part is the snapshot's share of the batch's phases (metrics.task).
        blocked = time.perf_counter() - started
        yield from main.drain()
        waited = time.perf_counter()
        pending.wait()
        pending = None
        AFTER_SNAPSHOT.fire(task.scope.batch_id, task.scope.partition_id)
        if operator.report_metrics:
            finished = time.perf_counter()
            snapshot = {
                "snapshot_seconds": finished - started,
                SNAPSHOT_BLOCKED_SECONDS: blocked + finished - waited,
            }
            hand_over(task.scope, spec.name, {**snapshot, **store.snapshot_metrics()})
        logger.debug(
            "state: operator %s batch %d partition %d emitted %d rows",
            spec.name,
            task.scope.batch_id,
            task.scope.partition_id,
            builder.total_rows,
        )
    except BaseException:
        if pending is not None:
            try:
                pending.wait()
            except Exception as exc:  # the task already fails with the first error
                logger.debug("state: snapshot of a failed task also failed: %s", exc)
        if store is not None:
            store.discard()
        raise
    finally:
        processor.close()


class _MainOutput:
    """The output builder's batches, with the ``__late`` column when there is a side output."""

    def __init__(self, builder: OutputBuilder, late_type: pa.DataType | None) -> None:
        self.builder = builder
        self.late_type = late_type

    def drain(self) -> Iterator[pa.RecordBatch]:
        for batch in self.builder.drain():
            if self.late_type is None:
                yield batch
            else:
                yield et.with_empty_late(batch, self.late_type)


def _round(_key: tuple[()], given: tuple[KeyedProcessor, Any], handle: KeyState) -> Any:
    """A round of due event-time timers handed to ``on_event_timers`` at once."""
    processor, due = given
    return processor.on_event_timers(due, handle)


def _fire(
    processor: KeyedProcessor,
    store: KeyedStateStore,
    handle: KeyState,
    main: _MainOutput,
    due: Sequence[tuple[int, int, Any]],
) -> Iterator[pa.RecordBatch]:
    for timestamp, key_group, key in due:
        store.set_current_key(key, key_group)
        handle.key = key
        handle.key_group = key_group
        _call(processor.on_timer, key, timestamp, handle, main.builder, what="on_timer")
        if main.builder.ready:
            yield from main.drain()


def _split_late(
    operator: OperatorTask,
    store: KeyedStateStore,
    handle: KeyState,
    table: pa.Table,
    partition: int,
) -> tuple[pa.Table | None, pa.Table | None]:
    """The records to process (with a ``__late`` flag under ``late="process"``) and the late
    records to the side output; None for either when there are none."""
    times = operator.event_time
    if times is None or operator.processor.handles_late:
        # A processor that handles late records routes the ones it rejects (emit_late).
        return table, None
    mask = et.late_mask(table, times.column, handle.watermark_ms)
    if times.late == "process":
        flags = mask if mask is not None else pa.array([False] * table.num_rows, pa.bool_())
        return table.append_column(et.LATE_COLUMN, flags), None
    if mask is None:
        return table, None
    late = table.filter(mask)
    kept = table.filter(pc.invert(mask))
    if times.late == "drop":
        logger.info(
            "state: operator %s batch %d partition %d dropped %d late records (watermark %d)",
            operator.spec.name,
            handle.batch_id,
            partition,
            late.num_rows,
            handle.watermark_ms,
        )
        et.count_dropped(store, late, KEY_GROUP_COLUMN)
        late = None
    return (kept if kept.num_rows else None), late


def _process_input(
    operator: OperatorTask,
    store: KeyedStateStore,
    handle: KeyState,
    main: _MainOutput,
    *,
    table: pa.Table,
    task: KeyedTask,
) -> Iterator[pa.RecordBatch]:
    spec = operator.spec
    _check_key_groups(spec, task, table)
    processed, late = _split_late(
        operator, store, handle, table.drop_columns([BATCH_TIME_COLUMN]), task.scope.partition_id
    )
    if late is not None and operator.late_type is not None:
        records = late.drop_columns([KEY_GROUP_COLUMN])
        yield et.side_output_batch(records, operator.schema, operator.late_type)
    if processed is None:
        return
    yield from _process_keys(
        operator.processor,
        store=store,
        handle=handle,
        main=main,
        table=processed,
        spec=spec,
        route_late=lambda: _route_rejected(operator, store, handle),
        sides=operator.sides,
    )


def _check_key_groups(spec: OperatorSpec, task: KeyedTask, table: pa.Table) -> None:
    """The task's records all belong to its key groups."""
    bounds = pc.min_max(table.column(KEY_GROUP_COLUMN))
    lowest, highest = bounds["min"].as_py(), bounds["max"].as_py()
    if lowest not in task.key_groups or highest not in task.key_groups:
        msg = (
            f"operator '{spec.name}': partition {task.scope.partition_id} owns key groups "
            f"{task.key_groups.label} but received key group {lowest}..{highest}; the input "
            "was repartitioned between firesteel's shuffle and the operator"
        )
        raise FiresteelError(msg)


def _process_table(
    operator: OperatorTask,
    store: KeyedStateStore,
    handle: KeyState,
    main: _MainOutput,
    *,
    table: pa.Table | None,
    task: KeyedTask,
) -> Iterator[pa.RecordBatch]:
    """The task's input handed whole to ``process_table`` (also when it got none)."""
    rows = None
    if table is not None:
        _check_key_groups(operator.spec, task, table)
        rows = table.drop_columns([BATCH_TIME_COLUMN])
    _call(_whole, (), (operator.processor, rows), handle, main.builder, what="process_table")
    if handle.rejected_late:
        yield from _route_rejected(operator, store, handle)
    yield from main.drain()


def _whole(_key: tuple[()], given: tuple[KeyedProcessor, pa.Table | None], handle: KeyState) -> Any:
    processor, rows = given
    return processor.process_table(rows, handle)


def _route_rejected(
    operator: OperatorTask, store: KeyedStateStore, handle: KeyState
) -> Iterator[pa.RecordBatch]:
    """Route the late records the processor handed to ``emit_late`` by the late policy."""
    rejected, handle.rejected_late = handle.rejected_late, []
    times = operator.event_time
    if times is None:
        msg = (
            f"operator '{operator.spec.name}': emit_late() needs an event-time column: "
            "stateful(..., event_time='<column>', watermark=BoundedOutOfOrderness(...))"
        )
        raise ConfigError(msg)
    if times.late == "side-output" and operator.late_type is not None:
        for records in rejected:
            yield et.side_output_batch(records, operator.schema, operator.late_type)
        return
    count = sum(_records_in(records) for records in rejected)
    # From process_table: records of many key groups, each counted in its own.
    per_group = all(KEY_GROUP_COLUMN in records.column_names for records in rejected)
    logger.info(
        "state: operator %s batch %d dropped %d late records of %s (watermark %s)",
        operator.spec.name,
        handle.batch_id,
        count,
        "their key groups" if per_group else f"key group {handle.key_group}",
        handle.watermark_ms,
    )
    if per_group:
        for records in rejected:
            et.count_dropped(store, records, KEY_GROUP_COLUMN)
        return
    et.count_dropped_in(store, handle.key_group, count)
    store.set_current_key(handle.key, handle.key_group)


def _records_in(rows: pa.Table) -> int:
    """How many input records ``rows`` stand for (a combined row for several)."""
    if et.COMBINED_COLUMN not in rows.column_names:
        return rows.num_rows
    return int(pc.sum(rows.column(et.COMBINED_COLUMN)).as_py() or 0)


def _process_keys(
    processor: KeyedProcessor,
    *,
    store: KeyedStateStore,
    handle: KeyState,
    main: _MainOutput,
    table: pa.Table,
    spec: OperatorSpec,
    route_late: Callable[[], Iterator[pa.RecordBatch]],
    sides: coprocess.Sides | None = None,
) -> Iterator[pa.RecordBatch]:
    builder = main.builder
    ordered, starts = _key_runs(table, spec.key_columns)
    index = pa.array(starts, pa.int64())
    key_values = [ordered.column(c).take(index).to_pylist() for c in spec.key_columns]
    key_groups = ordered.column(KEY_GROUP_COLUMN).take(index).to_pylist()
    data = ordered.drop_columns([KEY_GROUP_COLUMN])
    as_pandas = getattr(processor, "input_format", "arrow") == "pandas"
    prepared = None if sides is not None or as_pandas else _prepare(processor, data, starts, handle)
    ends = [*starts[1:], ordered.num_rows]
    for position, key in enumerate(zip(*key_values, strict=True)):
        store.set_current_key(key, key_groups[position])
        handle.key = key
        handle.key_group = key_groups[position]
        start = starts[position]
        rows: Any
        if prepared is not None:
            rows = prepared[position]
        else:
            rows = data.slice(start, ends[position] - start)
        if sides is not None:
            for method, what, part in _split_sides(processor, rows, sides):
                given = part.to_pandas() if as_pandas else part
                _call(method, key, given, handle, builder, what=what)
        else:
            if as_pandas:
                rows = rows.to_pandas()
            _call(processor.process, key, rows, handle, builder, what="process")
        if handle.rejected_late:
            yield from route_late()
        if builder.ready:
            yield from main.drain()


def _prepare(
    processor: KeyedProcessor, data: pa.Table, starts: list[int], handle: KeyState
) -> Sequence[Any] | None:
    """What ``processor.prepare`` makes of the batch's records, one item per key (or None)."""
    if type(processor).prepare is KeyedProcessor.prepare:
        return None
    handle.key = ()
    try:
        prepared = processor.prepare(data, starts, handle)
    except FiresteelError:
        raise
    except Exception as exc:
        msg = (
            f"operator '{handle.operator}': prepare() raised in batch {handle.batch_id}: "
            f"{type(exc).__name__}: {exc}"
        )
        raise ProcessorError(msg) from exc
    if prepared is not None and len(prepared) != len(starts):
        msg = (
            f"operator '{handle.operator}': prepare() returned {len(prepared)} items for "
            f"{len(starts)} keys in batch {handle.batch_id}; return one per key, or None"
        )
        raise ProcessorError(msg)
    return prepared


def _split_sides(
    processor: KeyedProcessor, rows: pa.Table, sides: coprocess.Sides
) -> Iterator[tuple[Any, str, pa.Table]]:
    """The key's rows of each input, with that input's columns (and ``__late`` if flagged),
    each with the method that takes them: left first."""
    co = cast(coprocess.CoProcessor, processor)
    marks = rows.column(coprocess.SIDE_COLUMN)
    extra = [et.LATE_COLUMN] if et.LATE_COLUMN in rows.column_names else []
    for side, columns, method in (
        ("left", sides[0], co.process_left),
        ("right", sides[1], co.process_right),
    ):
        part = rows.filter(pc.equal(marks, side))
        if part.num_rows:
            yield method, f"process_{side}", part.select([*columns, *extra])


def _apply_broadcast(
    operator: OperatorTask,
    store: KeyedStateStore,
    task: KeyedTask,
    handle: KeyState,
    *,
    builder: OutputBuilder,
    received: pa.Table | None,
    states: dict[str, StateDescriptor],
) -> dict[str, Any]:
    """Apply the batch's broadcast records; the broadcast maps, read-only."""
    declared = broadcasts.broadcast_descriptors(states)
    if not declared:
        return {}
    context = broadcasts.BroadcastContext(
        store, task.key_groups, task.scope.batch_id, task.scope.partition_id, declared
    )

    def one(record: dict[str, Any]) -> None:
        def call(_key: Any, given: Any, _handle: Any) -> Any:
            return operator.processor.process_broadcast(given, context)

        _call(call, (), record, handle, builder, what="process_broadcast")

    return broadcasts.apply(context, broadcasts.records(received, operator.broadcast_order), one)


def _call(
    method: Any,
    key: tuple[Any, ...],
    arg: Any,
    handle: KeyState,
    builder: OutputBuilder,
    *,
    what: str,
) -> None:
    try:
        builder.add(method(key, arg, handle), key)
    except FiresteelError:
        raise
    except Exception as exc:
        msg = (
            f"operator '{handle.operator}': {what}() raised on key {key!r} in batch "
            f"{handle.batch_id}: {type(exc).__name__}: {exc}"
        )
        raise ProcessorError(msg) from exc
