"""Harness job: write the driver JVM's command-line flags to a file, run one Spark job.

Usage: jvm_probe_job.py <output file>
"""

from __future__ import annotations

import sys
from pathlib import Path

from firesteel.testing.jobs import job_session


def main() -> None:
    spark = job_session("firesteel-jvm-probe")
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    Path(sys.argv[1]).write_text("\n".join(runtime.getInputArguments()))
    assert spark.range(100).count() == 100
    spark.stop()


if __name__ == "__main__":
    main()
