"""A Python for the processes Spark starts that imports PySpark from its installed package.

Spark starts every Python process of a job (the planner and commit runners on
the driver, the daemons and workers of executors, the streaming source runner)
with ``<SPARK_HOME>/python/lib/pyspark.zip``, the py4j zip and the spark-core
jar ahead of everything else on ``PYTHONPATH``. For a PySpark installed from
its wheel (``SPARK_HOME`` is the package folder) the zips are copies of the
installed package, but Python cannot cache the bytecode of a module it imports
from a zip, so each of a job's dozen Python processes compiled PySpark afresh
(0.5-1 s of CPU each), and every task and runner call read the 6,000 entries of
the jar again (``importlib.invalidate_caches`` in ``setup_spark_files``).
Measured on the files crash job (2 cores): the Python processes used 14 s of
CPU per run with the zips and 8 s without.

:func:`worker_python` writes, once per interpreter and PySpark installation and
under :func:`~firesteel.testing.jvm.cache_dir`, a ``sh`` script that drops
exactly those entries (they lie under the PySpark package folder) from
``PYTHONPATH`` and runs the interpreter, whose own ``site-packages`` holds the
very same PySpark. :func:`use_worker_python` hands it to Spark as
``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON``; harness jobs
(:func:`~firesteel.testing.jobs.job_session`) and the test suites' sessions call it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import sys
from pathlib import Path

from firesteel.testing.jvm import cache_dir

logger = logging.getLogger(__name__)

_SCRIPT = """#!/bin/sh
# Written by firesteel.testing.workerpython: Spark puts PySpark's zips and jar ahead
# of site-packages on PYTHONPATH; drop them (site-packages holds the same PySpark,
# compiled) and run the interpreter.
set -f
kept=
IFS=:
for entry in $PYTHONPATH; do
  case $entry in
    {lib}/*|{jars}/*) ;;
    *) kept=${{kept:+$kept:}}$entry ;;
  esac
done
unset IFS
if [ -n "$kept" ]; then export PYTHONPATH="$kept"; else unset PYTHONPATH; fi
exec {python} "$@"
"""


def worker_python(python: str) -> str:
    """The interpreter Spark should start for ``python``: the wrapper script, or ``python``.

    Only this process's own interpreter (by any of its names in its folder) is
    wrapped, and only when its PySpark is a wheel installation that carries
    ``python/lib/pyspark.zip``: any other interpreter may need the zips to import
    PySpark at all. Returns ``python`` unchanged (and logs why) when the script
    cannot be written.
    """
    if not _is_this_interpreter(python):
        return python
    import pyspark

    package = Path(pyspark.__file__).resolve().parent
    if not (package / "python" / "lib" / "pyspark.zip").is_file():
        return python
    script = _SCRIPT.format(
        lib=shlex.quote(str(package / "python" / "lib")),
        jars=shlex.quote(str(package / "jars")),
        python=shlex.quote(str(Path(python).absolute())),
    )
    key = hashlib.sha256(script.encode()).hexdigest()[:16]
    path = cache_dir() / "python" / f"worker-python-{key}.sh"
    try:
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
            partial.write_text(script)
            partial.chmod(0o755)
            os.replace(partial, path)
    except OSError as exc:
        logger.warning("no worker Python wrapper, workers import PySpark from its zip: %s", exc)
        return python
    return str(path)


def _is_this_interpreter(python: str) -> bool:
    """``python`` runs this interpreter with this environment: the same file, found in
    the same folder (a virtual environment's ``bin/python`` and ``bin/python3``, not
    another environment's link to the same binary)."""
    here = Path(sys.executable).absolute()
    there = Path(python).absolute()
    try:
        return there.parent == here.parent and there.samefile(here)
    except OSError:
        return False


def use_worker_python() -> None:
    """Point ``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON`` at :func:`worker_python`.

    Either one unset or naming this interpreter gets the wrapper; one naming
    another interpreter is kept. Call it before the session is created: Spark
    reads both from the environment its JVM inherits.
    """
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        os.environ[name] = worker_python(os.environ.get(name, sys.executable))
