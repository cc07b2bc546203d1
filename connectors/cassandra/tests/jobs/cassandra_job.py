"""Crash-test job: firesteel.files source -> firesteel.cassandra (mode=upsert).

Usage: cassandra_job.py <input dir> <checkpoint> <host> <port> <keyspace> <table>
<max files per batch>
"""

from __future__ import annotations

import sys

from firesteel.testing.jobs import job_session, read_parquet_files, run_available


def main() -> None:
    source, checkpoint, host, port, keyspace, table, max_files = sys.argv[1:8]
    spark = job_session("firesteel-cassandra-crash")
    records = read_parquet_files(spark, source, max_files).repartition(2, "seq")
    records = records.selectExpr("seq", "concat('body-', CAST(seq AS STRING)) AS body")
    writer = (
        records.writeStream.format("firesteel.cassandra")
        .option("contact.points", host)
        .option("port", port)
        .option("keyspace", keyspace)
        .option("table", table)
        .option("guarantee", "exactly-once")
    )
    run_available(spark, writer, checkpoint)


if __name__ == "__main__":
    main()
