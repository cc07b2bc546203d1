"""The layout of firesteel's records beside a Spark checkpoint, defined once.

Every writer and reader of ``<checkpoint>/firesteel/`` builds its locations
with these functions (each returns a location in the spelling of
``checkpoint``, a local path or a URI)::

    <checkpoint>/firesteel/
        guarantee-<sink>.json          the guarantee a query runs with, per sink
        metrics/<sink>/<N>.json        what batch N of a sink did
        <source>-source-<digest>/      a source's pinned start, bad-record counts, progress
        <connector>-sink-<sink>/       a sink's own records (the Kafka sink's topic layout)
        wal/<sink>/...                 write-ahead-log segments and plans (the default folder)
        wal-commits/                   the file checkpoint committer's markers
        control/                       requests to the running query and their answers
        savepoints/<id>.json           each savepoint taken of the query's state

Spark never reads this folder. A data folder's own records (the file sink's
pending files and manifests) live under its ``_firesteel/`` instead, which
Spark's and pyarrow's dataset readers skip (see the file connector).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

FIRESTEEL_DIR = "firesteel"
"""Sub-folder of a Spark checkpoint holding firesteel's own records."""
_METRICS = "metrics"
_GUARANTEE = ("guarantee-", ".json")
_SOURCE = "-source-"


def records(checkpoint: str) -> str:
    """``<checkpoint>/firesteel``: the folder of every record below."""
    return f"{checkpoint.rstrip('/')}/{FIRESTEEL_DIR}"


def guarantee(checkpoint: str, sink_id: str) -> str:
    """The guarantee record of sink ``sink_id``."""
    prefix, suffix = _GUARANTEE
    return f"{records(checkpoint)}/{prefix}{sink_id}{suffix}"


def guarantee_sink(name: str) -> str | None:
    """The sink id of a guarantee record's file name, None for any other name."""
    prefix, suffix = _GUARANTEE
    if name.startswith(prefix) and name.endswith(suffix):
        return name[len(prefix) : -len(suffix)]
    return None


def metrics(checkpoint: str, sink_id: str = "") -> str:
    """The per-batch metrics records of sink ``sink_id`` (of every sink without one)."""
    folder = f"{records(checkpoint)}/{_METRICS}"
    return f"{folder}/{sink_id}" if sink_id else folder


def digest(value: Any) -> str:
    """A short digest of a JSON-able ``value``, for names that change when it does."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def source(checkpoint: str, connector: str, subscription: Any) -> str:
    """The folder of a ``connector`` source reading ``subscription`` (JSON-able: what it
    subscribes to), named by its :func:`digest` so a changed subscription is a new folder."""
    return f"{records(checkpoint)}/{connector}{_SOURCE}{digest(subscription)}"


def source_connector(name: str) -> str | None:
    """The connector of a source folder's name (``kafka`` of ``kafka-source-<digest>``), None
    for any other name."""
    connector, found, _ = name.partition(_SOURCE)
    return connector if found else None


def sink(checkpoint: str, connector: str, sink_id: str) -> str:
    """The folder of a ``connector`` sink's own records."""
    return f"{records(checkpoint)}/{connector}-sink-{sink_id}"


def write_ahead_log(checkpoint: str) -> str:
    """The default folder of write-ahead-log segments and plans."""
    return f"{records(checkpoint)}/wal"


def write_ahead_commits(checkpoint: str) -> str:
    """The file checkpoint committer's markers."""
    return f"{records(checkpoint)}/wal-commits"


def control(checkpoint: str) -> str:
    """Requests to the running query from another process (a stop with a savepoint) and
    the driver's answers."""
    return f"{records(checkpoint)}/control"


def savepoints(checkpoint: str) -> str:
    """A record per savepoint taken of the query's state (where, of which batch, when)."""
    return f"{records(checkpoint)}/savepoints"
