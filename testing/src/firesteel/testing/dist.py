"""Each distribution installed alone from the built wheels, as a user outside this
repository installs it: ``python -m firesteel.testing.dist [--keep DIR]`` (``make check-dist``).

Builds every wheel (``make dist``), then for each of ``firesteel``,
``firesteel-rocksdb``, ``firesteel-kafka``, ``firesteel-cassandra`` and
``firesteel-pipelines``: a fresh virtual environment with only PySpark, the
distribution installed with ``--find-links dist`` (its pin on ``firesteel`` resolves
from the same folder), and a small job run with that environment's Python
(:mod:`firesteel.testing.scripts.dist_job`): files -> files exactly-once, keyed state
on RocksDB, a Kafka -> Kafka exactly-once round trip on a broker started here, files
-> Cassandra's write-ahead-log sink on the CQL test server started here (or
``FIRESTEEL_CASSANDRA_HOSTS``), a pipeline's ``verify`` (``--built``: the wheels already
in ``dist/``). Prints each step's seconds; exits 1 when a job's output is not what it
must be. uv and its cache make the installs fast; this takes minutes, so it runs beside
the soak commands, not in the suite.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import pyspark

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[4]
"""The repository (this module lives in testing/src/firesteel/testing)."""
JOB = Path(__file__).parent / "scripts" / "dist_job.py"
ROWS = 300
"""Records each job writes (``dist_job.ROWS``)."""


def _timed(what: str, command: Sequence[str], **kwargs: object) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    seconds = time.monotonic() - started
    if done.returncode != 0:
        msg = f"{what} exited with {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        raise RuntimeError(msg)
    print(f"{seconds:7.1f} s  {what}", flush=True)
    return seconds, done.stdout


def _pyspark_wheel(wheels: Path) -> None:
    """Build PySpark's wheel into ``wheels`` once: PyPI has its source distribution only,
    and uv built it again for every fresh environment (6-10 minutes each on 2 loaded cores)."""
    if not any(wheels.glob(f"pyspark-{pyspark.__version__}-*.whl")):
        pin = f"pyspark=={pyspark.__version__}"
        command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), pin]
        _timed("PySpark's wheel, built once", command)


def _built_names() -> set[str]:
    """The distributions ``dist/`` holds wheels of (``firesteel_kafka-0.1.0-...`` ->
    ``firesteel-kafka``)."""
    return {w.name.split("-")[0].replace("_", "-") for w in (ROOT / "dist").glob("*.whl")}


def _venv(uv: str, folder: Path, distribution: str) -> Path:
    python = folder / "bin" / "python"
    shutil.rmtree(folder, ignore_errors=True)
    _timed(f"{distribution}: uv venv", [uv, "venv", "-q", "--python", sys.executable, str(folder)])
    pin = f"pyspark=={pyspark.__version__}"
    wheels = ["--find-links", str(folder.parent / "wheels")]
    _timed(
        f"{distribution}: PySpark alone",
        [uv, "pip", "install", "-q", "--python", str(python), *wheels, pin],
    )
    # Every build is version 0.1.0: uv's cache would serve a wheel of an earlier build
    # under that name and version, so the repository's own distributions are refreshed.
    refresh = [f"--refresh-package={name}" for name in _built_names()]
    _timed(
        f"{distribution}: pip install --find-links dist {distribution}",
        [
            uv,
            "pip",
            "install",
            "-q",
            "--python",
            str(python),
            *refresh,
            "--find-links",
            str(ROOT / "dist"),
            distribution,
        ],
    )
    return python


def _expect(what: str, found: dict[str, int], wanted: dict[str, int]) -> bool:
    ok = found == wanted
    print(f"         {what}: {found} ({'as expected' if ok else f'expected {wanted}'})", flush=True)
    return ok


def _check(uv: str, work: Path, distribution: str, job: str) -> bool:
    """Install ``distribution`` alone into a fresh environment and run its ``job``; whether its
    output is right (:class:`RuntimeError` when a step fails)."""
    python = _venv(uv, work / distribution, distribution)
    env = {"PATH": f"{python.parent}:/usr/bin:/bin", "PYSPARK_PYTHON": str(python)}
    env["HOME"] = str(work)
    if job == "pipelines":
        sensors = ROOT / "examples" / "pipelines" / "sensors"
        command = [
            str(python.parent / "firesteel"),
            "pipeline",
            "verify",
            "blueprint.conf",
            "--conf",
            "local.conf",
        ]
        _timed(f"{distribution}: firesteel pipeline verify", command, cwd=sensors, env=env)
        return True
    folder = work / f"{job}-job"
    shutil.rmtree(folder, ignore_errors=True)
    arguments = [str(python), str(JOB), job, str(folder)]
    if job == "kafka":
        from firesteel.testing.kafka import kafka_cluster

        with kafka_cluster(work / "broker") as bootstrap:
            _, out = _timed(f"{distribution}: Kafka -> Kafka job", [*arguments, bootstrap], env=env)
        wanted = {"rows": ROWS, "distinct": ROWS}
        return _expect("records in the output topic", json.loads(out), wanted)
    if job == "cassandra":
        from firesteel.testing.cassandra import cassandra_cluster

        with cassandra_cluster() as (host, port):
            _, out = _timed(
                f"{distribution}: files -> Cassandra job", [*arguments, f"{host}:{port}"], env=env
            )
        wanted = {"rows": ROWS, "distinct": ROWS}
        return _expect("rows in the table", json.loads(out), wanted)
    _, out = _timed(f"{distribution}: {job} job", arguments, env=env)
    wanted = {"rows": ROWS} if job == "files" else {"keys": 7, "total": ROWS // 7 + 1}
    return _expect("output", json.loads(out), wanted)


def main(argv: Sequence[str] | None = None) -> int:
    """Build, install each distribution alone, run its job; 0 when every job's output is right."""
    parser = argparse.ArgumentParser(prog="python -m firesteel.testing.dist", description=__doc__)
    parser.add_argument("--keep", type=Path, help="build the environments here and keep them")
    parser.add_argument("--built", action="store_true", help="use dist/ as it is (no make dist)")
    args = parser.parse_args(argv)
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or "uv"
    work = args.keep or Path(tempfile.mkdtemp(prefix="firesteel-dist-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if not args.built:
        _timed("make dist", ["make", "-s", "dist"], cwd=ROOT)
    _pyspark_wheel(work / "wheels")
    ok = True
    try:
        for distribution, job in (
            ("firesteel-pipelines", "pipelines"),
            ("firesteel", "files"),
            ("firesteel-rocksdb", "rocksdb"),
            ("firesteel-kafka", "kafka"),
            ("firesteel-cassandra", "cassandra"),
        ):
            try:
                ok &= _check(uv, work, distribution, job)
            except RuntimeError as exc:
                # A job that fails says so and the others still run: each is its own evidence.
                print(f"         FAILED: {str(exc)[-1500:]}", flush=True)
                ok = False
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{time.monotonic() - started:7.1f} s  in all: {'every job right' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
