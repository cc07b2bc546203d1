"""Crash-test job: firesteel.files source -> stateful rank per key (rocksdb backend) -> files sink.

Usage: rocksdb_state_job.py <input dir> <output dir> <checkpoint> <state uri> <local dir>
<files per batch> <parallelism>

Input rows are ``(seq, key)``. The processor keeps a per-key count in keyed
state and emits ``(seq, key, rank)`` per record, ``rank`` being the record's
1-based position among its key's records; every key also sets a timer per
batch, and a fired timer emits ``(-timestamp, key, 0)``. Lost or doubled
state updates shift ranks; lost or doubled output shows in the seq count.
``retain=1`` makes every batch collect the files of the one before, so a kill
lands among uploads, restores and deletions alike.
"""

from __future__ import annotations

import sys

from firesteel.rocksdb import RocksDBBackend
from firesteel.testing.jobs import job_session, read_parquet_files, write_files_exactly_once
from firesteel.testing.processors import rank_with_timers


def main() -> None:
    source, out, checkpoint, state_uri, local_dir, files_per_batch, parallelism = sys.argv[1:8]
    spark = job_session("firesteel-rocksdb-crash")
    records = read_parquet_files(spark, source, files_per_batch)
    backend = RocksDBBackend(state_uri, local_dir=local_dir, retain=1)
    ranked = rank_with_timers(records, backend, int(parallelism))
    write_files_exactly_once(spark, ranked, out, checkpoint)


if __name__ == "__main__":
    main()
