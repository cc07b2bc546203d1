"""The connector author's toolkit: helpers a connector may use, none it must implement.

The roles a connector implements are :mod:`firesteel.core.spi`'s; this module
holds what the core's own connectors build them with, published under the same
promise (``make lint`` lets a separately installed distribution import both).

**Storage.** A :class:`Folder` is a folder on any store addressed by relative
keys: whole-file writes under the durability policy, create-if-absent, reads,
listings, deletes and local fsyncs, its failures naming the operation and the
path; it pickles, so it travels to tasks. :mod:`~firesteel.core.layout` names
every location of firesteel's records beside a Spark checkpoint
(``<checkpoint>/firesteel/``). Below it, :func:`resolve` turns a location as
Spark users write it (a local path, ``s3a://``, ``gs://``, ``abfs://``,
``hdfs://``) and a :class:`StorageConfig` (Hadoop-named settings from options
and ``spark.hadoop.fs.*``) into a pyarrow filesystem and path;
:func:`check_location` names a missing bucket, refused credentials or an
unreachable endpoint before the first batch; :func:`storage_error` turns a
filesystem failure into an error naming the setting to fix; :func:`store_type`
names the store behind a resolved filesystem; :class:`Location` is a resolved
location, :func:`canonical` spells one one way, :data:`SETTING_PREFIX` starts
every storage option and :data:`OBJECT_STORES` names the filesystems whose
uploads are atomic and which have no rename.

**Versioned durable records.** One envelope (kind, format version, SHA-256 of
the content) over any pyarrow filesystem: :func:`write_record`,
:func:`create_record`, :func:`read_record` and, for bytes a caller stores
itself, :func:`encode_record` / :func:`decode_record`. :func:`write_atomically`
/ :func:`atomic_output` write any other file whole or not at all;
:func:`make_parent` creates a file's folder where folders exist.

**The query behind a checkpoint.** :func:`query_identity` (the query's id, or
the checkpoint's canonical spelling before Spark wrote one), :func:`read_query_id`
and :func:`has_committed` (whether the query committed a batch: a restarted
query rides out outages from its first request).

**Sink ownership.** :class:`Ownership`: a sink id belongs to the Spark query
that first wrote it; another query is refused with a ``ConfigError`` naming the
fix.

**Retrying until a deadline.** :class:`RetryWindow`: the waits (doubling,
bounded) and the deadline of a loop that rides out an outage; the caller logs
each wait naming its server and setting, and raises its own error once the
window expired.

**Per-worker cache and processes.** :class:`WorkerCache`: what a Python worker
keeps between tasks (sessions, clients, stores); :class:`Reaper` makes sure
no child process outlives the process that started it, even one killed by SIGKILL.

**Options beyond the declaration.** :func:`is_secret` is the one rule for which
settings are never logged; :func:`require_absolute` refuses relative paths.

**Bad records.** They go to the configured :class:`ErrorPolicy` through an
:class:`ErrorHandler` (quarantined, for example, into a
:class:`FolderDeadLetter`).

**Metrics and time.** :func:`task_metrics` gives the running task's :class:`TaskMetrics`
for a connector's counters; :func:`timed` times a step of the commit;
:func:`bad_record_counts` sums a source's bad records kept under :data:`ERRORS_DIR`
(``errors/<range>.json``, as ``firesteel status`` reads them). :func:`to_epoch` counts a
datetime (naive means UTC) or a number in :data:`MILLIS` or :data:`MICROS` since the
epoch.
"""

from firesteel.core import layout
from firesteel.core.checkpoint import (
    has_committed,
    query_identity,
    read_query_id,
    write_savepoint_taken,
)
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
from firesteel.core.folder import Folder
from firesteel.core.guarded_fs import store_type
from firesteel.core.logs import timed
from firesteel.core.metrics import TaskMetrics, task_metrics
from firesteel.core.metrics.sources import ERRORS as ERRORS_DIR
from firesteel.core.metrics.sources import bad_record_counts
from firesteel.core.options import is_secret, require_absolute
from firesteel.core.ownership import Ownership
from firesteel.core.reaper import Reaper
from firesteel.core.retry_window import RetryWindow
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
    "ERRORS_DIR",
    "MICROS",
    "MILLIS",
    "OBJECT_STORES",
    "SETTING_PREFIX",
    "BadRecord",
    "DeadLetter",
    "DeadLetterWriter",
    "ErrorHandler",
    "ErrorPolicy",
    "Folder",
    "FolderDeadLetter",
    "Location",
    "Ownership",
    "Reaper",
    "RetryWindow",
    "StorageConfig",
    "TaskMetrics",
    "WorkerCache",
    "atomic_output",
    "bad_record_counts",
    "canonical",
    "check_location",
    "create_record",
    "decode_record",
    "encode_record",
    "has_committed",
    "is_secret",
    "layout",
    "make_parent",
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
    "write_savepoint_taken",
]
