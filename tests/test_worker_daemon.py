"""firesteel's worker daemon (:mod:`firesteel.core.spark.daemon`) as Spark starts it."""

from __future__ import annotations

import struct
import subprocess
import sys
import zipfile
import zipimport
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
        # Zip archives on the path (none where PySpark is installed as a package) and any
        # found later are served by the daemon's importer.
        zips = {
            type(finder).__name__
            for finder in sys.path_importer_cache.values()
            if isinstance(finder, zipimport.zipimporter)
        }
        hooks = {getattr(hook, "__name__", "") for hook in sys.path_hooks}
        stable = zips <= {"StableZipImporter"} and "StableZipImporter" in hooks
        stable = stable and zipimport.zipimporter not in sys.path_hooks
        for _ in batches:
            pass
        yield pa.record_batch(
            [
                pa.array([gc.get_freeze_count()]),
                pa.array([not walked]),
                pa.array([stable]),
            ],
            names=["frozen", "pandas", "stable"],
        )

    schema = "frozen long, pandas boolean, stable boolean"
    rows = spark.range(2, numPartitions=2).mapInArrow(inherited, schema)
    for row in rows.collect():
        assert row.frozen > 10_000 and row.pandas and row.stable, row


def test_a_stable_zip_importer_imports_and_keeps_its_directory(tmp_path: Path) -> None:
    # PySpark's zip must stay importable (modules it imports lazily) though invalidating
    # the import caches no longer re-reads it.
    from firesteel.core.spark.daemon import StableZipImporter

    path = tmp_path / "lib.zip"
    with zipfile.ZipFile(path, "w") as out:
        out.writestr("stable_zip_probe/__init__.py", "VALUE = 1\n")
        out.writestr("stable_zip_probe/later.py", "VALUE = 2\n")
    importer = StableZipImporter(str(path))
    importer.invalidate_caches()
    assert importer.find_spec("stable_zip_probe") is not None
    sys.path.insert(0, str(path))
    sys.path_importer_cache[str(path)] = importer
    try:
        import stable_zip_probe  # type: ignore[import-not-found]
        from stable_zip_probe import later  # type: ignore[import-not-found]

        assert (stable_zip_probe.VALUE, later.VALUE) == (1, 2)
    finally:
        sys.path.remove(str(path))
        sys.path_importer_cache.pop(str(path), None)
        for name in ("stable_zip_probe", "stable_zip_probe.later"):
            sys.modules.pop(name, None)


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
