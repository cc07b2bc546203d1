"""A Spark-free job for harness tests: commits numbered steps, announces fault points.

Usage: toy_job.py <state_dir> <steps> [sleep_seconds]

Each step N is committed by creating ``<state_dir>/step-N``; a restarted run
skips committed steps, like a query resuming from its checkpoint. Before
committing, the job calls the ``driver.mid_commit`` fault point for batch N.
At start it also leaves a detached helper process in a session of its own
(like ``pyspark.daemon``), whose PID it records, so tests can check that the
harness kills processes outside the job's process group.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from firesteel.core.faults import MID_COMMIT


def main() -> None:
    state = Path(sys.argv[1])
    steps = int(sys.argv[2])
    pause = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    state.mkdir(parents=True, exist_ok=True)
    helper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    with open(state / "helpers", "a") as out:
        out.write(f"{helper.pid}\n")
    for step in range(steps):
        marker = state / f"step-{step}"
        if marker.exists():
            continue
        time.sleep(pause)
        MID_COMMIT.fire(step)
        marker.touch()
    helper.kill()
    helper.wait()


if __name__ == "__main__":
    main()
