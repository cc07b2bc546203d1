"""PySpark's worker daemon, with pyarrow, PySpark's worker and firesteel imported before it forks.

Spark starts one Python daemon per executor (``python -m pyspark.daemon``) and
forks a worker from it whenever a Python task finds no idle worker to reuse.
PySpark imports the worker module, pyarrow and firesteel only after the fork,
so every forked worker imports them again: 0.15-0.3 s of CPU each. The crash
tests restart their jobs and kill workers, so workers are forked afresh all
the time (527 daemons and forks in one run of the suite). This daemon imports them once and
its forks inherit them. Measured on the S3 shared-driver crash test (2 cores):
the task workers used 32 s of CPU instead of 40.

PySpark defers those imports because pyarrow and numpy start threads when
imported (jemalloc's background thread, OpenBLAS's pool) and a fork copies only
the forking thread. Both libraries register fork handlers for this case (Arrow
re-creates its pools in the child; OpenBLAS stops its pool before a fork), and
the daemon itself never runs a task, so its pool threads are idle, holding no
lock, whenever it forks.
firesteel does not set it for users' jobs: a long-running job reuses its
workers and forks rarely.

Spark applies ``spark.python.daemon.module`` to the task workers only; its
planner and commit runners start ``pyspark.daemon`` whatever it says.
"""

from __future__ import annotations

from collections.abc import Mapping

DAEMON_CONFIG: Mapping[str, str] = {"spark.python.daemon.module": __name__}
"""The session setting that makes Spark start this module as its worker daemon."""

if __name__ == "__main__":
    import pyarrow.fs  # noqa: F401
    import pyspark.worker  # noqa: F401
    from pyspark.daemon import manager

    import firesteel.core  # noqa: F401

    manager()
