"""PySpark's worker daemon, with pyarrow, pandas, PySpark's worker and firesteel imported
before it forks.

Spark starts one Python daemon per executor (``python -m pyspark.daemon``) and
forks a worker from it whenever a Python task finds no idle worker to reuse.
PySpark imports the worker module, pyarrow and firesteel only after the fork, and
pyarrow imports pandas on a worker's first ``pyarrow.array`` call (to ask whether its
argument is a pandas object), so every forked worker imports them again before it can
connect back to the JVM, which waits for it a fixed 10 s. This daemon imports them once and its
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

Memory: what the daemon imported is shared with its workers only while no worker
writes the pages it is on, and PySpark's worker runs a full garbage collection
after every task, which writes the collector's header of every object it
walks: the daemon freezes its objects (``gc.freeze()``) so the workers'
collections skip them. A daemon and two workers that imported pandas
(2026-11-29, ``local[2]``): 52 + 84 + 84 MB PSS with neither, 67 x 3 with
pandas in the daemon but no freeze, 43 + 52 + 52 with both.

The daemon also drops from ``sys.path`` the Java archives Spark puts on the workers'
``PYTHONPATH`` that hold no Python (Spark's core jar): PySpark's worker invalidates the
import caches before every task, and a zip importer then reads its archive's whole
directory again (about 6,000 entries of that jar, every task, in every worker).

The archives left (PySpark's own zip, py4j's) are read through zip importers that keep
their directory when the import caches are invalidated: those archives do not change
while a worker lives (a file Spark ships again under the same name must have the same
content), and re-reading PySpark's zip before every task took 7% of a window job's
Python time (py-spy, 5M events).

Spark applies ``spark.python.daemon.module`` to the task workers only; its
planner and commit runners start ``pyspark.daemon`` whatever it says.
"""

import sys
import zipfile
import zipimport


class StableZipImporter(zipimport.zipimporter):
    """A zip importer whose archive's directory survives ``importlib.invalidate_caches``."""

    def invalidate_caches(self) -> None:
        return None


def keep_zip_directories() -> None:
    """Serve every zip archive on the import path, now and later, by a
    :class:`StableZipImporter`."""
    sys.path_hooks[:] = [
        StableZipImporter if hook is zipimport.zipimporter else hook for hook in sys.path_hooks
    ]
    for entry, finder in list(sys.path_importer_cache.items()):
        if type(finder) is zipimport.zipimporter:
            sys.path_importer_cache[entry] = StableZipImporter(entry)


def holds_python(entry: str) -> bool:
    """False for a Java archive on ``sys.path`` with no Python module in it."""
    if not entry.endswith(".jar"):
        return True
    try:
        with zipfile.ZipFile(entry) as archive:
            return any(name.endswith((".py", ".pyc")) for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return True  # not ours to judge: leave it where Spark put it


if __name__ == "__main__":
    import gc

    dropped = {entry for entry in sys.path if not holds_python(entry)}
    sys.path[:] = [entry for entry in sys.path if entry not in dropped]
    for entry in dropped:  # the finder cache, which invalidation walks, has them already
        sys.path_importer_cache.pop(entry, None)
    import pandas  # noqa: F401
    import pyarrow.fs  # noqa: F401
    import pyspark.worker  # noqa: F401
    from pyspark.daemon import manager

    import firesteel.core  # noqa: F401

    keep_zip_directories()
    gc.freeze()
    manager()
