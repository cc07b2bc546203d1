"""Crash-test job: firesteel.files source -> stateful running count -> firesteel.files sink.

Usage: state_job.py <input dir> <output dir> <checkpoint> <state uri> <files per batch>
<parallelism> [<savepoint to restore from>]

Input rows are ``(seq, key)``. The processor keeps a per-key count in keyed
state (filesystem backend) and emits one row per input record:
``(seq, key, rank)`` where ``rank`` is the record's 1-based position among its
key's records in seq order. Any lost or doubled state update shifts ranks, and
any lost or doubled output shows in the seq count, so the test can check both.
Every key also sets a timer per batch; fired timers emit ``(-timestamp, key, 0)``.
The state URI may be an object store's (``s3a://bucket/state``): the backend
reaches it with the session's ``spark.hadoop.fs.s3a.*`` settings.
"""

from __future__ import annotations

import sys

from firesteel.backends import FilesystemBackend
from firesteel.testing.jobs import job_session, read_parquet_files, write_files_exactly_once
from firesteel.testing.processors import rank_with_timers


def main() -> None:
    source, out, checkpoint, state_uri, files_per_batch, parallelism = sys.argv[1:7]
    restore_from = sys.argv[7] if len(sys.argv) > 7 else None
    spark = job_session("firesteel-state-crash")
    records = read_parquet_files(spark, source, files_per_batch)
    backend = FilesystemBackend(state_uri, full_snapshot_every=3, retain=3)
    ranked = rank_with_timers(records, backend, int(parallelism), restore_from)
    write_files_exactly_once(spark, ranked, out, checkpoint)


if __name__ == "__main__":
    main()
