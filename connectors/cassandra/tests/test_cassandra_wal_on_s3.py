"""``mode=wal`` with its log on an S3 server process: ``log.location`` and ``fs.s3a.*`` options.

The sink is built from options as the ``firesteel.cassandra`` data source
builds it, writes a batch's segment to ``s3a://``, and sends it once the batch
commits. Rows are read back through cassandra-driver and the log's objects
listed with boto3 (neither is firesteel's code).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql.types import LongType, StringType, StructField, StructType

from firesteel.cassandra.connector import CassandraConnector
from firesteel.cassandra.wal import CassandraWalSink
from firesteel.core.context import TaskScope
from firesteel.testing.s3 import S3Server

SCHEMA = StructType([StructField("id", LongType(), False), StructField("v", StringType())])


def test_the_write_ahead_log_lives_where_log_location_says(
    cluster_address: tuple[str, int], session: Any, s3_server: S3Server, tmp_path: Any
) -> None:
    session.execute("CREATE TABLE wal_s3 (id bigint PRIMARY KEY, v text)")
    bucket = s3_server.create_bucket("cassandra-wal-log")
    host, port = cluster_address
    options = {
        "contact.points": host,
        "port": str(port),
        "keyspace": session.keyspace,
        "table": "wal_s3",
        "mode": "wal",
        "log.location": f"s3a://{bucket}/wal",
        "checkpointlocation": str(tmp_path / "ck"),
        **s3_server.settings(),
    }
    sink, _ = CassandraConnector(options).create_sink(SCHEMA)
    assert isinstance(sink, CassandraWalSink)
    sink.prepare()
    rows = pa.record_batch(
        {"id": pa.array(range(20), pa.int64()), "v": [f"r{i}" for i in range(20)]}
    )
    vote = sink.write_partition(TaskScope("q", 0, 0, 0), iter([rows]))

    client = s3_server.client()
    listed = client.list_objects_v2(Bucket=bucket, Prefix="wal/")
    keys = [item["Key"] for item in listed.get("Contents", [])]
    assert [k for k in keys if k.endswith(".arrow")], keys
    assert not list(session.execute("SELECT id FROM wal_s3")), "nothing is sent before the commit"

    sink.commit_batch(0, [vote])
    stored = {r.id: r.v for r in session.execute("SELECT id, v FROM wal_s3")}
    assert stored == {i: f"r{i}" for i in range(20)}
    listed = client.list_objects_v2(Bucket=bucket, Prefix="wal/")
    keys = [item["Key"] for item in listed.get("Contents", [])]
    assert not [k for k in keys if k.endswith(".arrow")], "the sent segment is deleted"
    assert f"wal/{sink.sink_id}/plans/0.json" in keys, keys
    assert not (tmp_path / "ck" / "firesteel" / "wal").exists(), "nothing in the checkpoint"
