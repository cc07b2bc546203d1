"""Savepoints: a portable, self-describing snapshot of operators' keyed state at one batch.

A checkpoint is each backend's own fast recovery path; a savepoint is the
portable one (Flink's): Parquet files of canonical rows plus one metadata
record written last, readable by any backend at any parallelism.

* :mod:`firesteel.state.savepoint.format` -- the layout, writing and reading;
* :mod:`firesteel.state.savepoint.restore` -- starting an operator from one
  (``stateful(..., restore_from=...)``);
* :mod:`firesteel.state.savepoint.table` -- writing one from a table (bootstrap,
  rewriting keys).

Savepoints are created from a backend's state by
:func:`firesteel.backends.savepoint.create` (``firesteel savepoint create``).
"""

from firesteel.state.savepoint.format import (
    OperatorSavepoint,
    Savepoint,
    SavepointError,
    open_savepoint,
)
from firesteel.state.savepoint.restore import SavepointRestore
from firesteel.state.savepoint.table import bootstrap, rewrite

__all__ = [
    "OperatorSavepoint",
    "Savepoint",
    "SavepointError",
    "SavepointRestore",
    "bootstrap",
    "open_savepoint",
    "rewrite",
]
