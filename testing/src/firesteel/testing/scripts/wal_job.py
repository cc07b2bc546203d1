"""Crash-test job: firesteel.files source -> hash partitions -> a write-ahead-log sink.

Usage: wal_job.py <input dir> <target> <checkpoint> <max files per batch> <plain|upsert>
[guarantee] [partitions] [log location]

The sink runs through ``firesteel.core.foreach_batch``: ``plain`` appends JSON
lines to ``<target>`` (at-least-once), ``upsert`` upserts into the SQLite file
``<target>`` (exactly-once). Every JSON line carries the batch and partition of
the segment it was sent from, so a test can tell re-sent segments apart.
With a log location (``s3a://bucket/prefix``), the segments and plans go to
``<location>/wal`` and the commit markers to ``<location>/wal-commits``,
reached with the session's ``spark.hadoop.fs.s3a.*`` settings; otherwise both
live in the checkpoint.
"""

from __future__ import annotations

import sys

from firesteel.core import Guarantee, foreach_batch, layout
from firesteel.core.storage import StorageConfig, session_settings
from firesteel.sinks.committers import FileCheckpointCommitter
from firesteel.testing.jobs import job_session, read_parquet_files, run_available
from firesteel.testing.scripts import wal_target


def main() -> None:
    source, target, checkpoint, max_files, mode = sys.argv[1:6]
    required = Guarantee.parse(sys.argv[6]) if len(sys.argv) > 6 else None
    partitions = int(sys.argv[7]) if len(sys.argv) > 7 else 3
    location = sys.argv[8] if len(sys.argv) > 8 else None
    spark = job_session("firesteel-wal-crash")
    storage = StorageConfig.of(session_settings(spark))
    sink_cls = wal_target.JsonLinesWalSink if mode == "plain" else wal_target.SqliteUpsertWalSink
    log_dir, committer = (
        (layout.write_ahead_log(checkpoint), FileCheckpointCommitter.for_checkpoint(checkpoint))
        if location is None
        else (f"{location}/wal", FileCheckpointCommitter(f"{location}/wal-commits", storage))
    )
    sink = sink_cls("wal-crash", log_dir, committer, target, storage)
    records = read_parquet_files(spark, source, max_files).repartition(partitions, "seq")
    writer = records.writeStream.foreachBatch(foreach_batch(sink, checkpoint, required))
    run_available(spark, writer, checkpoint)


if __name__ == "__main__":
    main()
