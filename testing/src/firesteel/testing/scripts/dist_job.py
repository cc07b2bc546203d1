"""A small job run in a virtual environment holding PySpark and one firesteel distribution
installed from the built wheels (``python -m firesteel.testing.dist``); imports only what
that distribution brings, never firesteel-testing.

``python dist_job.py files|rocksdb <workdir>``, ``python dist_job.py kafka <workdir>
<bootstrap>`` or ``python dist_job.py cassandra <workdir> <host:port>``; prints one JSON
line: the records the output holds, counted with pyarrow, a plain Kafka consumer or a
plain cassandra-driver session.
"""

import json
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

ROWS = 300


def _inputs(folder: Path) -> None:
    folder.mkdir(parents=True)
    for index in range(3):
        seq = list(range(index * ROWS // 3, (index + 1) * ROWS // 3))
        table = pa.table({"seq": pa.array(seq, pa.int64()), "key": [f"k{s % 7}" for s in seq]})
        pq.write_table(table, folder / f"part-{index}.parquet")


def _session():
    from firesteel.core import LOCAL_PROFILE, local_session

    return local_session("dist-check", config={**LOCAL_PROFILE, "spark.driver.host": "127.0.0.1"})


def _run(df, workdir: Path, fmt: str = "firesteel.files", **options: str) -> None:
    writer = df.writeStream.format(fmt).option("checkpointLocation", str(workdir / "ck"))
    for key, value in options.items():
        writer = writer.option(key.replace("_", "."), value)
    writer.trigger(availableNow=True).start().awaitTermination()


def files(workdir: Path) -> dict[str, int]:
    _inputs(workdir / "in")
    spark = _session()
    events = spark.readStream.format("firesteel.files").load(str(workdir / "in"))
    _run(events, workdir, path=str(workdir / "out"), guarantee="exactly-once")
    return {"rows": ds.dataset(str(workdir / "out")).to_table().num_rows}


def rocksdb(workdir: Path) -> dict[str, int]:
    from firesteel.rocksdb import RocksDBBackend
    from firesteel.state import KeyedProcessor, ValueStateDescriptor, stateful

    class Count(KeyedProcessor):
        count = ValueStateDescriptor("count", int)

        def process(self, key, rows, state):
            count = state.value(self.count)
            count.update((count.value() or 0) + rows.num_rows)
            return [{"key": key[0], "count": count.value()}]

    _inputs(workdir / "in")
    spark = _session()
    events = spark.readStream.format("firesteel.files").load(str(workdir / "in"))
    counts = stateful(
        events,
        key="key",
        processor=Count(),
        output_schema="key string, count long",
        backend=RocksDBBackend(str(workdir / "state")),
    )
    _run(counts, workdir, path=str(workdir / "out"))
    table = ds.dataset(str(workdir / "out")).to_table()
    return {
        "keys": len(set(table.column("key").to_pylist())),
        "total": pa.compute.max(table.column("count")).as_py(),
    }


def kafka(workdir: Path, bootstrap: str) -> dict[str, int]:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    source, target = f"in-{uuid.uuid4().hex[:8]}", f"out-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in (source, target)]).values():
        future.result(60)
    producer = Producer({"bootstrap.servers": bootstrap})
    for seq in range(ROWS):
        producer.produce(source, value=str(seq).encode())
    producer.flush(60)
    spark = _session()
    events = (
        spark.readStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
    )
    _run(
        events.select("key", "value"),
        workdir,
        "firesteel.kafka",
        kafka_bootstrap_servers=bootstrap,
        topic=target,
        guarantee="exactly-once",
    )
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": uuid.uuid4().hex,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([target])
    seen: set[bytes] = set()
    read = 0
    for _ in range(120):
        for message in consumer.consume(500, 0.5):
            value = message.value()
            if message.error() is None and value is not None:
                seen.add(value)
                read += 1
        if read >= ROWS:
            break
    consumer.close()
    return {"rows": read, "distinct": len(seen)}


def cassandra(workdir: Path, server: str) -> dict[str, int]:
    from cassandra.cluster import Cluster

    host, _, port = server.partition(":")
    cluster = Cluster([host], port=int(port), protocol_version=4)
    session = cluster.connect()
    session.execute(
        "CREATE KEYSPACE IF NOT EXISTS dist WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    session.execute("CREATE TABLE IF NOT EXISTS dist.events (seq bigint PRIMARY KEY, key text)")
    _inputs(workdir / "in")
    spark = _session()
    events = spark.readStream.format("firesteel.files").load(str(workdir / "in"))
    _run(
        events,
        workdir,
        "firesteel.cassandra",
        contact_points=host,
        port=port,
        keyspace="dist",
        table="events",
        mode="wal",
    )
    rows = list(session.execute("SELECT seq FROM dist.events"))
    cluster.shutdown()
    return {"rows": len(rows), "distinct": len({row.seq for row in rows})}


if __name__ == "__main__":
    kind, folder = sys.argv[1], Path(sys.argv[2])
    if kind == "kafka":
        result = kafka(folder, sys.argv[3])
    elif kind == "cassandra":
        result = cassandra(folder, sys.argv[3])
    else:
        result = {"files": files, "rocksdb": rocksdb}[kind](folder)
    print(json.dumps(result), flush=True)
