"""Crash-test job of the tests and the soak command: firesteel.files -> firesteel.cassandra.

Usage: sink_job.py <input dir> <checkpoint> <host> <port> <keyspace> <table>
<max files per batch> [<mode> [<partitions>]]
"""

from __future__ import annotations

import sys

from firesteel.testing.jobs import job_session, read_parquet_files, run_available


def main() -> None:
    source, checkpoint, host, port, keyspace, table, max_files = sys.argv[1:8]
    mode = sys.argv[8] if len(sys.argv) > 8 else "upsert"
    partitions = int(sys.argv[9]) if len(sys.argv) > 9 else 2
    spark = job_session("firesteel-cassandra-crash")
    records = read_parquet_files(spark, source, max_files).repartition(partitions, "seq")
    records = records.selectExpr("seq", "concat('body-', CAST(seq AS STRING)) AS body")
    writer = (
        records.writeStream.format("firesteel.cassandra")
        .option("contact.points", host)
        .option("port", port)
        .option("keyspace", keyspace)
        .option("table", table)
        .option("guarantee", "exactly-once")
        .option("mode", mode)
        .option("max.in.flight", "2")
    )
    run_available(spark, writer, checkpoint)


if __name__ == "__main__":
    main()
