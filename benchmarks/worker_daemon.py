"""What firesteel's worker daemon (:mod:`firesteel.core.spark.daemon`) saves, and whether it
changes the "Python worker failed to connect back" failures on a loaded machine.

``python -m benchmarks.worker_daemon [--jobs 20] [--parallel 4]``:

1. the imports each forked worker no longer does (pyarrow, PySpark's worker,
   firesteel), timed in fresh interpreters, median of five;
2. the same short job (a session with :data:`firesteel.core.LOCAL_PROFILE`, a files ->
   files exactly-once query over three small files) ``--jobs`` times with the daemon
   and as many times without it, interleaved, ``--parallel`` at once; each failure is
   counted, and those whose error names the connect-back wait apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

IMPORTS = "import pyarrow.fs, pyspark.worker, firesteel.core"
JOB = """
import sys
import pyarrow as pa, pyarrow.parquet as pq
from pathlib import Path
from firesteel.core import LOCAL_PROFILE, local_session

work, daemon = Path(sys.argv[1]), sys.argv[2] == "on"
(work / "in").mkdir(parents=True)
for i in range(3):
    table = pa.table({"seq": list(range(i * 10, i * 10 + 10))})
    pq.write_table(table, work / "in" / f"{i}.parquet")
config = {k: v for k, v in LOCAL_PROFILE.items() if daemon or k != "spark.python.daemon.module"}
spark = local_session("worker-daemon", config={**config, "spark.driver.host": "127.0.0.1"})
query = (
    spark.readStream.format("firesteel.files").load(str(work / "in"))
    .writeStream.format("firesteel.files").option("path", str(work / "out"))
    .option("guarantee", "exactly-once").option("checkpointLocation", str(work / "ck"))
    .trigger(availableNow=True).start()
)
query.awaitTermination()
"""


def import_seconds(runs: int = 5) -> tuple[float, float]:
    """Median wall seconds of a fresh interpreter doing nothing, and doing the imports."""

    def timed(code: str) -> float:
        started = time.monotonic()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.monotonic() - started

    bare = statistics.median(timed("pass") for _ in range(runs))
    loaded = statistics.median(timed(IMPORTS) for _ in range(runs))
    return bare, loaded


def one_job(workdir: Path, daemon: str) -> dict[str, object]:
    """Run the job once; its seconds and how it ended."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", JOB, str(workdir), daemon],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    errors = done.stderr
    named = [line for line in errors.splitlines() if "Error" in line or "Exception" in line]
    return {
        "daemon": daemon,
        "seconds": round(time.monotonic() - started, 1),
        "ok": done.returncode == 0,
        "connect_back": "connect back" in errors,
        "error": named[-1][:200] if done.returncode != 0 and named else None,
    }


def main() -> None:
    """Measure and print the figures (and one JSON line of them)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.worker_daemon")
    parser.add_argument("--jobs", type=int, default=20, help="jobs with, and as many without")
    parser.add_argument("--parallel", type=int, default=4, help="jobs at once")
    args = parser.parse_args()
    bare, loaded = import_seconds()
    print(f"a worker's imports: {loaded - bare:.2f} s wall ({loaded:.2f} s against {bare:.2f} s)")
    root = Path(tempfile.mkdtemp(prefix="worker-daemon-"))
    plan = [(root / f"job-{i}", "on" if i % 2 == 0 else "off") for i in range(2 * args.jobs)]
    with ThreadPoolExecutor(args.parallel) as pool:
        results = []
        for result in pool.map(lambda job: one_job(*job), plan):
            print(json.dumps({**result, "load": round(os.getloadavg()[0], 1)}), flush=True)
            results.append(result)
    for daemon in ("on", "off"):
        runs = [r for r in results if r["daemon"] == daemon]
        failed = [r for r in runs if not r["ok"]]
        seconds = statistics.median(float(r["seconds"]) for r in runs)  # type: ignore[arg-type]
        print(
            f"daemon {daemon}: {len(runs)} jobs, {len(failed)} failed "
            f"({sum(bool(r['connect_back']) for r in failed)} connect-back), "
            f"median {seconds:.1f} s"
        )


if __name__ == "__main__":
    main()
