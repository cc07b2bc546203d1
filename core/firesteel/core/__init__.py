"""firesteel core: the checkpoint-commit protocol, the guarantee check and the Spark adapters.

``firesteel`` itself is a PEP 420 namespace shared by separately installed
distributions (``firesteel-kafka``, ...), so it cannot carry attributes; the
public entry points live here::

    from firesteel.core import register
    register(spark)
"""

from firesteel.core.checkpoint import read_guarantee
from firesteel.core.errors import (
    CheckpointCorruptError,
    CheckpointNotFoundError,
    ConfigError,
    FiresteelError,
    GuaranteeError,
    MissingDependencyError,
    RecordError,
)
from firesteel.core.guarantee import Guarantee, Replay, SinkKind, end_to_end
from firesteel.core.metrics.history import read_history
from firesteel.core.metrics.sources import read_source_progress
from firesteel.core.registry import register
from firesteel.core.spark.foreach import foreach_batch
from firesteel.core.spark.session import LOCAL_PROFILE, WORKER_DAEMON, local_session

__all__ = [
    "LOCAL_PROFILE",
    "WORKER_DAEMON",
    "CheckpointCorruptError",
    "CheckpointNotFoundError",
    "ConfigError",
    "FiresteelError",
    "Guarantee",
    "GuaranteeError",
    "MissingDependencyError",
    "RecordError",
    "Replay",
    "SinkKind",
    "end_to_end",
    "foreach_batch",
    "local_session",
    "read_guarantee",
    "read_history",
    "read_source_progress",
    "register",
]
