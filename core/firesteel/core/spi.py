"""The connector author's roles: the names a connector implements and what each promises.

A separately installed distribution (``firesteel-kafka``, ``firesteel-cassandra``,
a copy of ``connectors/_template``) imports firesteel only from this module,
from :mod:`firesteel.core.toolkit` (the helpers a connector may use: storage,
durable records, ownership, retry, metrics), from the layer interfaces built on
them (:mod:`firesteel.sources.spi`, :mod:`firesteel.sinks.spi` for the
write-ahead-log framework, :mod:`firesteel.backends.spi` for state backends)
and from the public user API (``firesteel.core``, ``firesteel.state``,
``firesteel.backends``). ``make lint`` enforces it; the rest of the core may
change between releases without notice.

The roles, in Flink's vocabulary (each class's docstring says when each method
is called and what is guaranteed):

**Registration and options.** A connector subclasses :class:`FiresteelDataSource`
(``firesteel.<connector>``), which builds its source and sink. Options are
frozen dataclasses of :func:`option` fields (sinks' derive from
:class:`SinkOptions`), bounded by ``option(min=, max=)`` and checked by
:func:`check_ranges` in ``__post_init__``, parsed by :func:`parse_options`:
unknown or misspelled keys are a :class:`ConfigError`. A sink's identity is
:func:`default_sink_id` unless the user sets ``sink.id``.

**Task identity.** :class:`TaskScope` (query, batch = checkpoint id, partition,
attempt) is the one identity of a task; everything durable is keyed by
(sink id, batch, partition), never by the attempt.

**The source role.** :class:`ResettableSource` (positions are :data:`Offset`
dicts, admission control a :class:`ReadLimit`): the same offset range reads the
same records, always; :meth:`ResettableSource.commit` is the
checkpoint-complete notification. Its capability is a :class:`Replay`.

**The sink roles** (Table 8-1's columns, :class:`SinkKind`, the capability a
sink states by its base class; :class:`Guarantee` is what a query asks for).
:class:`PlainSink` and :class:`IdempotentSink` write in the task. A two-phase
sink splits as Flink's Sink V2 does: a :class:`SinkWriter` on the executors
prepares a typed, versioned :class:`Committable` per task (its :class:`Vote`),
and a :class:`Committer` on the driver commits them once every task voted,
reporting a :class:`CommitOutcome` (committed, already committed) or raising
(retry later; failed, a :class:`SinkError`). :class:`TwoPhaseCommitSink` joins
both halves; a target that can only commit inside the task (Kafka) derives from
:class:`InTaskCommitSink`.

**Errors.** Every error derives from :class:`FiresteelError` and names the
option, record, file or batch at fault. A reader refuses a damaged record
(:class:`CheckpointCorruptError`) and a format it does not know
(:class:`IncompatibleFormatError`), never misreads either.

**Test hooks** are not part of this interface: a connector declares its fault
points (where the crash tests kill a job) and fires the protocol's
(``MID_COMMIT`` between a committer's durable steps), and a driver starting
several named queries reports each (``name_query``), through
:mod:`firesteel.core.faults`, the one test-hook module a distribution may
import besides these, and lists its declaring modules under the entry point
group ``firesteel.fault_points``.
"""

from firesteel.core.context import TaskScope
from firesteel.core.errors import (
    CheckpointCorruptError,
    ConfigError,
    FiresteelError,
    IncompatibleFormatError,
    MissingDependencyError,
    RecordError,
    SinkError,
    SourceChangedError,
)
from firesteel.core.guarantee import Guarantee, Replay, SinkKind
from firesteel.core.options import check_ranges, option, parse_options
from firesteel.core.sink import (
    CommitOutcome,
    Committable,
    Committer,
    IdempotentSink,
    InTaskCommitSink,
    PlainSink,
    Sink,
    SinkWriter,
    TwoPhaseCommitSink,
    Vote,
)
from firesteel.core.source import Offset, ReadLimit, ResettableSource
from firesteel.core.spark.datasource import FiresteelDataSource, SinkOptions, default_sink_id

__all__ = [
    "CheckpointCorruptError",
    "CommitOutcome",
    "Committable",
    "Committer",
    "ConfigError",
    "FiresteelDataSource",
    "FiresteelError",
    "Guarantee",
    "IdempotentSink",
    "InTaskCommitSink",
    "IncompatibleFormatError",
    "MissingDependencyError",
    "Offset",
    "PlainSink",
    "ReadLimit",
    "RecordError",
    "Replay",
    "ResettableSource",
    "Sink",
    "SinkError",
    "SinkKind",
    "SinkOptions",
    "SinkWriter",
    "SourceChangedError",
    "TaskScope",
    "TwoPhaseCommitSink",
    "Vote",
    "check_ranges",
    "default_sink_id",
    "option",
    "parse_options",
]
