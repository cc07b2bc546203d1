"""Crash-test job: records and a rules stream (both firesteel.files) -> keyed ranking with
broadcast state -> firesteel.files sink.

Usage: broadcast_job.py <records dir> <rules dir> <output dir> <checkpoint> <state uri>
<files per batch> <parallelism>

Records are ``(seq, key)``, rules ``(rule, limit, version)``, one rules file per batch.
The processor (:class:`~firesteel.testing.processors.RankPerKeyWithRules`) ranks records
per key in keyed state and keeps the latest limit per rule in broadcast state; each
output row ``(seq, key, rank, rules, partition)`` carries a digest of the broadcast map
its partition held.
"""

from __future__ import annotations

import sys

from firesteel.backends import FilesystemBackend
from firesteel.state import stateful
from firesteel.testing.jobs import job_session, read_parquet_files, write_files_exactly_once
from firesteel.testing.processors import RankPerKeyWithRules


def main() -> None:
    source, rules, out, checkpoint, state_uri, files_per_batch, parallelism = sys.argv[1:8]
    spark = job_session("firesteel-broadcast-crash")
    ranked = stateful(
        read_parquet_files(spark, source, files_per_batch),
        key=["key"],
        processor=RankPerKeyWithRules(),
        output_schema="seq long, key string, rank long, rules string, partition long",
        backend=FilesystemBackend(state_uri, full_snapshot_every=2, retain=3),
        name="rules",
        parallelism=int(parallelism),
        max_parallelism=8,
        broadcast=read_parquet_files(spark, rules, "1"),
        broadcast_order="version",
    )
    write_files_exactly_once(spark, ranked, out, checkpoint)


if __name__ == "__main__":
    main()
