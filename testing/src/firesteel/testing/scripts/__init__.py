"""The crash-test jobs the test suites and the soak command (:mod:`firesteel.testing.soak`) run.

Each is a script (``python <script> args``) over sequence-numbered Parquet
input, so its output can be counted: ``files_job`` (files -> map -> files),
``state_job`` (files -> keyed state with timers -> files) and ``wal_job``
(files -> a write-ahead-log sink into :mod:`~firesteel.testing.scripts.wal_target`).
"""

from __future__ import annotations

from pathlib import Path


def script(name: str) -> Path:
    """The path of job ``name`` (e.g. ``"files_job"``) for :meth:`CrashHarness.run`."""
    return Path(__file__).parent / f"{name}.py"
