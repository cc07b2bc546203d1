"""The connector author's interface: everything a connector may rely on from the core.

A separately installed distribution (``firesteel-kafka``, ``firesteel-cassandra``,
a copy of ``connectors/_template``) imports firesteel only from this module,
from the layer interfaces built on it (:mod:`firesteel.sources.spi` for a
source's records beside the checkpoint, :mod:`firesteel.sinks.spi` for the
write-ahead-log framework, :mod:`firesteel.backends.spi` for state backends)
and from the public user API (the packages ``firesteel.core``,
``firesteel.state`` and ``firesteel.backends``). ``make lint`` enforces it; the
rest of the core may change between releases without notice.

The contract, in Flink's vocabulary:

**Task identity.** :class:`TaskScope` (query, batch = checkpoint id,
partition, attempt) is the one identity of a task; everything durable is keyed
by (sink id, batch, partition), never by the attempt.

**The source role.** :class:`ResettableSource`: the same offset range reads
the same records, always; :meth:`ResettableSource.commit` is the
checkpoint-complete notification.

**The sink roles** (Table 8-1's columns, :class:`SinkKind`): a sink states its
kind by its base class. :class:`PlainSink` and :class:`IdempotentSink` write
in the task. A two-phase sink splits as Flink's Sink V2 does: a
:class:`SinkWriter` on the executors prepares a typed, versioned
:class:`Committable` per task (its :class:`Vote`), and a :class:`Committer` on
the driver commits them once every task voted. Commit outcomes: ``commit``
returning means **committed**; raising means **failed** for this attempt, and
Spark runs the batch's commit again after the restart (**retry later**); a
:class:`SinkError` names a failure a retry cannot cure. Every commit is an
**idempotent re-commit**: committing what is already committed (the same
batch, or a re-run of it) keeps the first result and returns.
:class:`TwoPhaseCommitSink` joins both halves; a target that can only commit
inside the task (Kafka) derives from :class:`InTaskCommitSink`, whose writer
commits and records a marker its re-run checks, and says so in its type.

**Versioned durable records.** One envelope (kind, format version, SHA-256 of
the content) over any pyarrow filesystem, local paths and URIs alike:
:func:`write_record`, :func:`create_record`, :func:`read_record` and, for
bytes a caller stores itself, :func:`encode_record` / :func:`decode_record`. A
reader refuses a damaged record (:class:`CheckpointCorruptError`) and a format
it does not know (:class:`IncompatibleFormatError`), never misreads either.
:func:`write_atomically` / :func:`atomic_output` write any other file whole or
not at all; :func:`make_parent` creates a file's folder where folders exist
(not on object stores, where it would cost requests for nothing).

**Storage.** A :class:`Folder` is a folder on any store addressed by relative keys:
whole-file writes under the durability policy, create-if-absent, reads,
listings, deletes and local fsyncs, its failures naming the operation and the
path; it pickles, so it travels to tasks. :mod:`~firesteel.core.layout` names
every location of firesteel's records beside a Spark checkpoint
(``<checkpoint>/firesteel/``). Below it, :func:`resolve` turns a location as
Spark users write it (a local path, ``s3a://``, ``gs://``, ``abfs://``,
``hdfs://``) and a
:class:`StorageConfig` (Hadoop-named settings from options and
``spark.hadoop.fs.*``) into a pyarrow filesystem and path;
:func:`check_location` names a missing bucket, refused credentials or an
unreachable endpoint before the first batch; :func:`storage_error` turns a
filesystem failure into an error naming the setting to fix; :func:`store_type`
names the store behind a resolved filesystem (``s3``, ``local``: every one is
wrapped, see :mod:`firesteel.core.guarded_fs`); :class:`Location`
is a resolved location, :func:`canonical` spells one one way,
:data:`SETTING_PREFIX` starts every storage option and :data:`OBJECT_STORES`
names the filesystems whose uploads are atomic and which have no rename.

**Sink ownership.** :class:`Ownership`: a sink id belongs to the Spark query
that first wrote it; another query is refused with a :class:`ConfigError`
naming the fix.

**Retrying until a deadline.** :class:`RetryWindow`: the waits (doubling, bounded) and
the deadline of a loop that rides out an outage; the caller logs each wait naming its
server and setting, and raises its own error once the window expired.

**Per-worker cache.** :class:`WorkerCache`: what a Python worker keeps between
tasks (sessions, clients, stores).

**Options and errors.** Options are frozen dataclasses of :func:`option`
fields (sinks' derive from :class:`SinkOptions`), parsed by
:func:`parse_options`: unknown or misspelled keys are a :class:`ConfigError`.
Every error derives from :class:`FiresteelError` and names the option,
record, file or batch at fault. Bad records go to the configured
:class:`ErrorPolicy` through an :class:`ErrorHandler` (quarantined, for
example, into a :class:`FolderDeadLetter`).

**Timestamps.** :func:`to_epoch` counts a datetime (naive means UTC) or a
number in :data:`MILLIS` or :data:`MICROS` since the epoch.

**Test hooks** are not part of this interface: a connector declares its fault
points (where the crash tests kill a job) and fires the protocol's
(``MID_COMMIT`` between a committer's durable steps), and a driver starting
several named queries reports each (``name_query``), through
:mod:`firesteel.core.faults`, the one test-hook module a distribution may
import besides these, and lists its declaring modules under the entry point
group ``firesteel.fault_points``.
"""

from firesteel.core import layout
from firesteel.core.checkpoint import has_committed, query_identity, read_query_id
from firesteel.core.context import TaskScope
from firesteel.core.durable import (
    atomic_output,
    create_record,
    decode_record,
    encode_record,
    make_parent,
    read_record,
    write_atomically,
    write_record,
)
from firesteel.core.epoch import MICROS, MILLIS, to_epoch
from firesteel.core.error_policy import (
    BadRecord,
    DeadLetter,
    DeadLetterWriter,
    ErrorHandler,
    ErrorPolicy,
    FolderDeadLetter,
)
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
from firesteel.core.folder import Folder
from firesteel.core.guarantee import Guarantee, Replay, SinkKind
from firesteel.core.guarded_fs import store_type
from firesteel.core.logs import timed
from firesteel.core.metrics import TaskMetrics, task_metrics
from firesteel.core.options import (
    check_ranges,
    is_secret,
    option,
    parse_options,
    require_absolute,
)
from firesteel.core.ownership import Ownership
from firesteel.core.reaper import Reaper
from firesteel.core.retry_window import RetryWindow
from firesteel.core.sink import (
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
from firesteel.core.storage import (
    OBJECT_STORES,
    SETTING_PREFIX,
    Location,
    StorageConfig,
    canonical,
    check_location,
    resolve,
    storage_error,
)
from firesteel.core.worker_cache import WorkerCache

__all__ = [
    "MICROS",
    "MILLIS",
    "OBJECT_STORES",
    "SETTING_PREFIX",
    "BadRecord",
    "CheckpointCorruptError",
    "Committable",
    "Committer",
    "ConfigError",
    "DeadLetter",
    "DeadLetterWriter",
    "ErrorHandler",
    "ErrorPolicy",
    "FiresteelDataSource",
    "FiresteelError",
    "Folder",
    "FolderDeadLetter",
    "Guarantee",
    "IdempotentSink",
    "InTaskCommitSink",
    "IncompatibleFormatError",
    "Location",
    "MissingDependencyError",
    "Offset",
    "Ownership",
    "PlainSink",
    "ReadLimit",
    "Reaper",
    "RecordError",
    "Replay",
    "ResettableSource",
    "RetryWindow",
    "Sink",
    "SinkError",
    "SinkKind",
    "SinkOptions",
    "SinkWriter",
    "SourceChangedError",
    "StorageConfig",
    "TaskMetrics",
    "TaskScope",
    "TwoPhaseCommitSink",
    "Vote",
    "WorkerCache",
    "atomic_output",
    "canonical",
    "check_location",
    "check_ranges",
    "create_record",
    "decode_record",
    "default_sink_id",
    "encode_record",
    "has_committed",
    "is_secret",
    "layout",
    "make_parent",
    "option",
    "parse_options",
    "query_identity",
    "read_query_id",
    "read_record",
    "require_absolute",
    "resolve",
    "storage_error",
    "store_type",
    "task_metrics",
    "timed",
    "to_epoch",
    "write_atomically",
    "write_record",
]
