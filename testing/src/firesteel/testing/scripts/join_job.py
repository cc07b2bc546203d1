"""Crash-test job: two firesteel.files sources -> the interval join -> firesteel.files.

Usage: join_job.py <input dir> <output dir> <checkpoint> <state uri> <files per batch>
<parallelism>

The input dir holds ``left/`` and ``right/`` Parquet files of ``(seq, key, ts)``
(:func:`~firesteel.testing.joins.write_join_files`); the output holds one row per joined
pair, written exactly-once, for :func:`~firesteel.testing.joins.check_join_output` to
compare with the reference. The state is on the filesystem backend.
"""

from __future__ import annotations

import sys
from pathlib import Path

from firesteel.backends import FilesystemBackend
from firesteel.testing.jobs import job_session, read_parquet_files, write_files_exactly_once
from firesteel.testing.joins import interval_join


def main() -> None:
    source, out, checkpoint, state_uri, files_per_batch, parallelism = sys.argv[1:7]
    spark = job_session("firesteel-join-crash")
    left = read_parquet_files(spark, str(Path(source) / "left"), files_per_batch)
    right = read_parquet_files(spark, str(Path(source) / "right"), files_per_batch)
    backend = FilesystemBackend(state_uri, full_snapshot_every=3, retain=3)
    joined = interval_join(left, right, backend, int(parallelism))
    write_files_exactly_once(spark, joined, out, checkpoint)


if __name__ == "__main__":
    main()
