"""PySpark's worker daemon, with pyarrow, PySpark's worker and firesteel imported before it forks.

Spark starts one Python daemon per executor (``python -m pyspark.daemon``) and
forks a worker from it whenever a Python task finds no idle worker to reuse.
PySpark imports the worker module, pyarrow and firesteel only after the fork,
so every forked worker imports them again before it can connect back to the
JVM, which waits for it a fixed 10 s. This daemon imports them once and its
forks inherit them: a worker starts in a fraction of the time, so fewer of them
miss that wait on a loaded machine. The figures are in the operations guide.

Opt in with :data:`firesteel.core.WORKER_DAEMON` (on in
:data:`~firesteel.core.LOCAL_PROFILE`). Nothing imports this module: Spark runs it
(``python -m``), and a module already imported when ``python -m`` runs it makes
Python warn in every worker's log.
``PYSPARK_PYTHON`` must have firesteel installed, as for any firesteel job.

PySpark defers those imports because pyarrow and numpy start threads when
imported (jemalloc's background thread, OpenBLAS's pool) and a fork copies only
the forking thread. Both libraries register fork handlers for this case (Arrow
re-creates its pools in the child; OpenBLAS stops its pool before a fork), and
the daemon itself never runs a task, so its pool threads are idle, holding no
lock, whenever it forks.

Spark applies ``spark.python.daemon.module`` to the task workers only; its
planner and commit runners start ``pyspark.daemon`` whatever it says.
"""

if __name__ == "__main__":
    import pyarrow.fs  # noqa: F401
    import pyspark.worker  # noqa: F401
    from pyspark.daemon import manager

    import firesteel.core  # noqa: F401

    manager()
