"""firesteel's worker daemon (:mod:`firesteel.core.spark.daemon`) as Spark starts it."""

from __future__ import annotations

import struct
import subprocess
import sys
import zipfile
from pathlib import Path


def test_the_daemon_starts_as_spark_runs_it_without_a_warning() -> None:
    # Spark runs `python -m <module>` and reads the port it listens on from its standard
    # output; the daemon stops when its standard input ends. A module the package had
    # already imported made Python warn at every start, in every worker log.
    started = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-m", "firesteel.core.spark.daemon"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert b"Warning" not in started.stderr, started.stderr.decode()[-2000:]
    assert len(started.stdout) == 4, started.stderr.decode()[-2000:]
    (port,) = struct.unpack("!i", started.stdout)
    assert 0 < port < 65536


def test_workers_inherit_the_daemons_imports_frozen(spark) -> None:  # type: ignore[no-untyped-def]
    # A full collection in a worker (PySpark runs one after every task) would otherwise write
    # into every inherited object and unshare its memory page (module docs).
    def inherited(batches):  # type: ignore[no-untyped-def]
        """How many objects the task's worker inherited frozen, and whether pandas' module
        namespace is among them (in none of the collector's generations)."""
        import gc

        import pandas
        import pyarrow as pa

        namespace = vars(pandas)
        walked = any(o is namespace for g in range(3) for o in gc.get_objects(generation=g))
        for _ in batches:
            pass
        yield pa.record_batch(
            [pa.array([gc.get_freeze_count()]), pa.array([not walked])], names=["frozen", "pandas"]
        )

    rows = spark.range(2, numPartitions=2).mapInArrow(inherited, "frozen long, pandas boolean")
    for row in rows.collect():
        assert row.frozen > 10_000 and row.pandas, row


def test_the_daemon_drops_only_java_archives_without_python(tmp_path: Path) -> None:
    # PySpark's worker invalidates the import caches before every task, which makes each
    # zip importer read its whole archive again: Spark's core jar (6,000 entries) has no
    # Python, so the daemon takes it off sys.path; anything that may hold Python stays.
    from firesteel.core.spark import daemon

    def archive(name: str, members: list[str]) -> str:
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as out:
            for member in members:
                out.writestr(member, "x = 1\n")
        return str(path)

    assert not daemon.holds_python(archive("core.jar", ["org/apache/A.class", "META-INF/x"]))
    assert daemon.holds_python(archive("py.jar", ["org/A.class", "pyspark/__init__.py"]))
    assert daemon.holds_python(archive("lib.zip", ["org/A.class"]))
    assert daemon.holds_python(str(tmp_path))
    (tmp_path / "broken.jar").write_bytes(b"not a zip")
    assert daemon.holds_python(str(tmp_path / "broken.jar"))
