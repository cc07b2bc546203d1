"""Crash-test job of the tests and the soak command: firesteel.files -> firesteel.cassandra.

Usage: sink_job.py <input dir> <checkpoint> <host> <port> <keyspace> <table>
<max files per batch> [<mode> [<partitions> [<send>]]]

``mode`` is ``upsert`` or ``wal`` (the table
:data:`~firesteel.testing.cassandra.soak.SINK_TABLE`: ``body`` is ``body-<seq>``,
the map ``attrs`` is ``{seq: <seq>, mod: <seq % 7>}``, written whole by the
INSERT; exactly-once); ``counter``: ``mode=wal`` with ``write=increment``
into ``(k bigint PRIMARY KEY, hits counter, total counter)``, adding 1 and
``seq`` under ``k = seq % 7``; or ``append``: ``mode=wal`` with ``write=append``
into ``(k bigint PRIMARY KEY, seqs list<bigint>)``, appending ``[seq]`` under
``k = seq % 7`` (both at-least-once); or ``map``: ``mode=upsert`` with
``write=append`` into ``(k bigint PRIMARY KEY, seen map<bigint, bigint>)``,
putting the entry ``seq: seq * 3`` under ``k = seq % 7`` (a map put repeated
changes nothing: exactly-once).

``send`` is ``driver`` (the default) or ``executors``: the job's driver then
runs the Spark Connect server on a free port and the write-ahead-log sink
gets ``send.connect`` pointing at it (:mod:`firesteel.sinks.fanout`).
"""

from __future__ import annotations

import sys

from firesteel.testing.jobs import (
    job_session,
    read_parquet_files,
    run_available,
    sends_on_executors,
)


def main() -> None:
    source, checkpoint, host, port, keyspace, table, max_files = sys.argv[1:8]
    mode = sys.argv[8] if len(sys.argv) > 8 else "upsert"
    partitions = int(sys.argv[9]) if len(sys.argv) > 9 else 2
    send = sys.argv[10] if len(sys.argv) > 10 else "driver"
    extra, connect = sends_on_executors() if send == "executors" else ({}, {})
    spark = job_session("firesteel-cassandra-crash", extra_config=extra)
    records = read_parquet_files(spark, source, max_files).repartition(partitions, "seq")
    guarantee, write = "exactly-once", "insert"
    if mode == "counter":
        records = records.selectExpr("seq % 7 AS k", "CAST(1 AS BIGINT) AS hits", "seq AS total")
        mode, guarantee, write = "wal", "at-least-once", "increment"
    elif mode == "append":
        records = records.selectExpr("seq % 7 AS k", "array(seq) AS seqs")
        mode, guarantee, write = "wal", "at-least-once", "append"
    elif mode == "map":
        records = records.selectExpr("seq % 7 AS k", "map(seq, seq * 3) AS seen")
        mode, write = "upsert", "append"
    else:
        records = records.selectExpr(
            "seq",
            "concat('body-', CAST(seq AS STRING)) AS body",
            "map('seq', seq, 'mod', seq % 7) AS attrs",
        )
    writer = (
        records.writeStream.format("firesteel.cassandra")
        .option("contact.points", host)
        .option("port", port)
        .option("keyspace", keyspace)
        .option("table", table)
        .option("guarantee", guarantee)
        .option("mode", mode)
        .option("write", write)
        .option("max.in.flight", "2")
        .options(**connect)
    )
    run_available(spark, writer, checkpoint)


if __name__ == "__main__":
    main()
