"""A class-data-sharing archive for the driver JVM of harness jobs: restarts start sooner.

A crash test restarts its job a dozen times, and every start loads the same
thousands of Spark classes from jar files. Java 13+ can write the classes a run
loaded to an archive when the JVM exits (``-XX:ArchiveClassesAtExit``) and map
that archive into later JVMs (``-XX:SharedArchiveFile``). Measured here (Java
17, 2 cores, the job flags of :data:`~firesteel.testing.jobs.QUICK_START_JVM`):
a session plus its first job took 6.4 s without the archive and 4.2 s with it.

:func:`driver_archive` makes the archive once per Java and PySpark
installation, with one short Spark job, under ``FIRESTEEL_CACHE_DIR`` (default
``~/.cache/firesteel``); the harness passes its path to jobs in
:data:`ARCHIVE_ENV` and :func:`~firesteel.testing.jobs.job_session` adds it to
the driver's JVM options. Java ignores an archive that does not match its
class path (``-Xshare:auto``, its default), so a stale one costs nothing but
the time it saves. Executors on a standalone cluster have another class path
and start without it.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

logger = logging.getLogger(__name__)

ARCHIVE_ENV = "FIRESTEEL_JVM_ARCHIVE"
"""The archive a job's driver JVM maps (set by the harness, read by ``job_session``)."""

CACHE_ENV = "FIRESTEEL_CACHE_DIR"
"""Where archives are kept; ``~/.cache/firesteel`` by default."""

_DUMP_ENV = "FIRESTEEL_JVM_ARCHIVE_DUMP"
"""Set only for the archiving job: where its driver JVM writes the archive at exit."""

UNUSED_DAYS = 7
"""An archive no harness used for this many days is deleted."""

CREATE_TIMEOUT = 900.0
"""Seconds the archiving job may take: about 15 on a quiet 2-core machine, and more than
180 at a load of 30 (six sessions' suites on the same two cores), where a shorter limit
left every job of the run without the archive, slower still."""

_ARCHIVING_JOB = """
import sys
import pyarrow as pa
import pyarrow.parquet as pq
from firesteel.testing.jobs import job_session

folder = sys.argv[1]
pq.write_table(pa.table({"seq": list(range(100))}), folder + "/in/part-0.parquet")
spark = job_session("firesteel-jvm-archive")
numbers = spark.range(1000)
numbers.groupBy((numbers.id % 7).alias("k")).count().collect()
query = (
    spark.readStream.format("firesteel.files").option("format", "parquet").load(folder + "/in")
    .groupBy("seq").count()
    .writeStream.format("noop").outputMode("complete")
    .option("checkpointLocation", folder + "/ck")
    .trigger(availableNow=True).start()
)
query.awaitTermination()
spark.stop()
"""


def cache_dir() -> Path:
    """The folder archives are kept in (:data:`CACHE_ENV`, else ``~/.cache/firesteel``)."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "firesteel"


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    return str(Path(java_home) / "bin" / "java") if java_home else (shutil.which("java") or "java")


def _archive_key() -> str:
    """What the archive depends on: the Java build, the PySpark jars and the job's flags.

    Java refuses an archive when a jar of the class path is not the very file it
    was made from (it compares size and modification time), so a virtual
    environment recreated at the same path needs a new one: the key covers
    every jar's name, size and time.
    """
    import pyspark

    from firesteel.testing.jobs import QUICK_START_JVM

    java = subprocess.run(
        [_java(), "-version"], capture_output=True, text=True, check=True, timeout=60
    ).stderr
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    stamps = sorted(
        f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}"
        for jar in jars.glob("*.jar")
        for stat in [jar.stat()]
    )
    parts = [java, pyspark.__version__, str(jars), QUICK_START_JVM, *stamps]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


@functools.cache
def driver_archive() -> Path | None:
    """The driver JVM's archive for this Java and PySpark, made on first use.

    Returns ``None`` (and logs why) when it cannot be made: jobs then start
    without it, only slower. The key includes the PySpark jars (path, size,
    time), since the archive is only valid for the class path it was made
    with: each virtual environment, and each reinstall, gets its own. Several
    processes asking at once make it once (a file lock); the archive appears
    under its final name only when complete.
    """
    try:
        folder = cache_dir() / "jvm"
        folder.mkdir(parents=True, exist_ok=True)
        archive = folder / f"driver-{_archive_key()}.jsa"
        with open(folder / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if archive.exists():
                os.utime(archive)
            else:
                _create(archive)
            _prune(folder)
        return archive
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("no JVM class archive, jobs start without one: %s", exc)
        return None


def _prune(folder: Path) -> None:
    """Delete archives no job asked for in :data:`UNUSED_DAYS` (each is ~170 MB): another
    virtual environment or Java has its own archive, and both may still be in use."""
    cutoff = time.time() - UNUSED_DAYS * 86400
    for old in folder.glob("driver-*.jsa"):
        if old.stat().st_mtime < cutoff:
            old.unlink(missing_ok=True)


def _create(archive: Path) -> None:
    partial = archive.with_name(f"{archive.stem}.{os.getpid()}.partial")
    with tempfile.TemporaryDirectory(prefix="firesteel-jvm-") as work:
        (Path(work) / "in").mkdir()
        env = {
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_DIRS": work,
            _DUMP_ENV: str(partial),
        }
        logger.info("making the JVM class archive %s (once per Java and PySpark)", archive)
        # A session of its own: on a timeout the job's JVM, its child, is killed with it
        # instead of living on orphaned.
        job = subprocess.Popen(
            [sys.executable, "-c", _ARCHIVING_JOB, work],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            _, errors = job.communicate(timeout=CREATE_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
            partial.unlink(missing_ok=True)
            raise
    if job.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        tail = "\n".join(errors.splitlines()[-20:])
        msg = f"the archiving job exited with {job.returncode}:\n{tail}"
        raise OSError(msg)
    os.replace(partial, archive)


def driver_java_options() -> str:
    """The archive flag for this process's driver JVM, from the environment ('' for none)."""
    dump = os.environ.get(_DUMP_ENV)
    if dump:
        return f"-XX:ArchiveClassesAtExit={dump}"
    return archive_option(os.environ.get(ARCHIVE_ENV))


def archive_option(archive: Path | str | None) -> str:
    """The JVM flag that maps ``archive`` ('' for none)."""
    return f"-XX:SharedArchiveFile={archive}" if archive else ""


def quick_start_flags() -> str:
    """The flags of a test job's driver JVM started outside the harness (a streamlet, the
    demo as a user runs it): :data:`~firesteel.testing.jobs.QUICK_START_JVM` and the
    class-data archive, if one can be made."""
    from firesteel.testing.jobs import QUICK_START_JVM

    return f"{QUICK_START_JVM} {archive_option(driver_archive())}".strip()


def quick_start_env() -> dict[str, str]:
    """This process's environment with :func:`quick_start_flags` as ``JAVA_TOOL_OPTIONS``,
    for a job started as a user starts it (the demo): its results do not depend on the
    flags, and its driver JVM starts in about two thirds of the time."""
    return {**os.environ, "JAVA_TOOL_OPTIONS": quick_start_flags()}
