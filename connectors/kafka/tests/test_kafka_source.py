"""The Kafka source against a real broker and real Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from firesteel.core.metrics.prometheus import CheckpointCollector
from firesteel.core.metrics.sources import read_source_progress
from firesteel.testing.kafka import create_topic, produce, read_committed, read_log


def _reader(spark, bootstrap, checkpoint: Path, options: dict[str, str]):
    reader = (
        spark.readStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("checkpointLocation", str(checkpoint))
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader


def _run(spark, bootstrap, tmp_path: Path, **options: str) -> tuple[list, Any]:
    """Read everything with a memory sink: its rows and the finished query."""
    query = (
        _reader(spark, bootstrap, tmp_path / "ck", options)
        .load()
        .writeStream.format("memory")
        .queryName(f"q{abs(hash(str(tmp_path))) % 10**8}")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    return spark.sql(f"select * from {query.name}").collect(), query


def _read_all(spark, bootstrap, tmp_path: Path, **options: str) -> list:
    return _run(spark, bootstrap, tmp_path, **options)[0]


def test_reads_every_record_once_with_schema(spark, bootstrap, tmp_path):
    topic = create_topic(bootstrap, partitions=3)
    values = [f"v{i}".encode() for i in range(300)]
    produce(bootstrap, topic, values, headers=[("h", b"x")])
    rows = _read_all(spark, bootstrap, tmp_path, subscribe=topic, startingOffsets="earliest")
    assert sorted(r.value for r in rows) == sorted(values)
    row = rows[0]
    assert set(row.asDict()) == {
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    }
    assert row.topic == topic and row.headers[0].key == "h" and row.headers[0].value == b"x"
    by_partition: dict[int, list[int]] = {}
    for r in rows:
        by_partition.setdefault(r.partition, []).append(r.offset)
    for offsets in by_partition.values():
        assert sorted(offsets) == list(range(len(offsets)))


def test_transaction_markers_never_stall_a_batch(spark, bootstrap, tmp_path):
    """A range that ends on a commit marker completes (the marker's offset counts)."""
    from confluent_kafka import Producer

    topic = create_topic(bootstrap, partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"})
    producer.init_transactions()
    for batch in range(3):
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, f"{batch}-{i}".encode())
        producer.commit_transaction()
    rows = _read_all(spark, bootstrap, tmp_path, subscribe=topic, startingOffsets="earliest")
    assert sorted(r.value.decode() for r in rows) == sorted(
        f"{b}-{i}" for b in range(3) for i in range(10)
    )
    assert max(r.offset for r in rows) == 31  # 3 x 10 records + 2 markers before the last batch


def test_aborted_transactions_never_surface(spark, bootstrap, tmp_path):
    """read_committed hides aborted data."""
    from confluent_kafka import Producer

    topic = create_topic(bootstrap, partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"})
    producer.init_transactions()
    for outcome in ("commit", "abort", "commit", "abort"):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, f"{outcome}-{i}".encode())
        if outcome == "commit":
            producer.commit_transaction()
        else:
            producer.abort_transaction()
    rows = _read_all(spark, bootstrap, tmp_path, subscribe=topic, startingOffsets="earliest")
    assert sorted(r.value.decode() for r in rows) == sorted([f"commit-{i}" for i in range(5)] * 2)


def test_pattern_json_offsets_and_latest(spark, bootstrap, tmp_path):
    prefix = f"pat{abs(hash(str(tmp_path))) % 10**6}"
    first = create_topic(bootstrap, partitions=2, name=f"{prefix}-a")
    create_topic(bootstrap, partitions=1, name=f"other{prefix}")
    produce(bootstrap, first, [f"a{i}".encode() for i in range(20)], partition=0)
    produce(bootstrap, first, [f"b{i}".encode() for i in range(20)], partition=1)
    rows = _read_all(
        spark,
        bootstrap,
        tmp_path,
        subscribePattern=f"{prefix}-.*",
        startingOffsets=json.dumps({first: {"0": 15, "1": -1}}),
    )
    assert sorted(r.value.decode() for r in rows) == [f"a{i}" for i in range(15, 20)]


def _start_memory_query(spark, bootstrap, tmp_path, name, **options):
    return (
        _reader(spark, bootstrap, tmp_path / "ck", options)
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )


def test_admission_control_is_fair_across_partitions(spark, bootstrap, tmp_path):
    topic = create_topic(bootstrap, partitions=2)
    produce(bootstrap, topic, [f"big{i}".encode() for i in range(100)], partition=0)
    produce(bootstrap, topic, [f"small{i}".encode() for i in range(6)], partition=1)
    query = _start_memory_query(
        spark,
        bootstrap,
        tmp_path,
        "fair",
        subscribe=topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="20",
    )
    try:
        query.processAllAvailable()
        rows = spark.sql("select partition, count(*) n from fair group by partition").collect()
        assert {r.partition: r.n for r in rows} == {0: 100, 1: 6}
        # The first batch split its 20 offsets fairly: all 6 of the small partition, 14 big.
        first = query.recentProgress[0]["sources"][0]["endOffset"]
        assert json.loads(first)["offset"] == {topic: {"0": 14, "1": 6}}
    finally:
        query.stop()


def test_new_topics_matching_the_pattern_are_picked_up(spark, bootstrap, tmp_path):
    prefix = f"grow{abs(hash(str(tmp_path))) % 10**6}"
    first = create_topic(bootstrap, partitions=1, name=f"{prefix}-1")
    produce(bootstrap, first, [b"one"])
    query = _start_memory_query(
        spark,
        bootstrap,
        tmp_path,
        "grow",
        subscribePattern=f"{prefix}-.*",
        startingOffsets="earliest",
    )
    try:
        query.processAllAvailable()
        second = create_topic(bootstrap, partitions=1, name=f"{prefix}-2")
        produce(bootstrap, second, [b"two", b"three"])
        for _ in range(3):
            query.processAllAvailable()
        rows = spark.sql("select value from grow").collect()
        assert sorted(r.value for r in rows) == [b"one", b"three", b"two"]
    finally:
        query.stop()


def test_new_partitions_are_picked_up(spark, bootstrap, tmp_path):
    from confluent_kafka.admin import AdminClient, NewPartitions

    topic = create_topic(bootstrap, partitions=1)
    produce(bootstrap, topic, [b"old"])
    query = _start_memory_query(
        spark, bootstrap, tmp_path, "parts", subscribe=topic, startingOffsets="earliest"
    )
    try:
        query.processAllAvailable()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_partitions([NewPartitions(topic, 2)]).values():
            future.result(30)
        produce(bootstrap, topic, [b"new"], partition=1)
        for _ in range(3):
            query.processAllAvailable()
        rows = spark.sql("select value from parts").collect()
        assert sorted(r.value for r in rows) == [b"new", b"old"]
    finally:
        query.stop()


def test_json_values_decode_into_columns_and_poison_records_follow_policy(
    spark, bootstrap, tmp_path
):
    topic = create_topic(bootstrap, partitions=1)
    dead = create_topic(bootstrap, partitions=1)
    good = [json.dumps({"id": i, "name": f"n{i}"}).encode() for i in range(10)]
    produce(bootstrap, topic, [*good[:5], b"{not json", *good[5:]])
    base = dict(subscribe=topic, startingOffsets="earliest")
    base["value.format"] = "json"
    base["value.schema"] = "id BIGINT, name STRING"
    with pytest.raises(Exception, match=rf"bad input at {topic}\[0\] offset 5: not JSON"):
        _read_all(spark, bootstrap, tmp_path / "fail", **base)
    skipped = _read_all(spark, bootstrap, tmp_path / "skip", errors="skip", **base)
    assert sorted(r.id for r in skipped) == list(range(10))
    assert "value" not in skipped[0].asDict() and skipped[0].name.startswith("n")
    base["errors.topic"] = dead
    _read_all(spark, bootstrap, tmp_path / "q", errors="quarantine", **base)
    quarantined = read_log(bootstrap, dead)
    assert quarantined.values == [b"{not json"]
    assert dict(quarantined.committed[0].headers)["firesteel.offset"] == b"5"
    # What status and Prometheus show of each query: the one bad record, under its policy.
    for run, policy in (("skip", "skipped"), ("q", "quarantined")):
        checkpoint = str(tmp_path / run / "ck")
        (progress,) = read_source_progress(checkpoint).values()
        assert progress["bad_records"] == {"skipped": 0, "quarantined": 0, policy: 1}
        (family,) = [
            f
            for f in CheckpointCollector({run: checkpoint}).collect()
            if f.name == "firesteel_source_bad_records"
        ]
        shown = {s.labels["policy"]: s.value for s in family.samples if s.name.endswith("_total")}
        assert shown == {"skipped": 0, "quarantined": 0, policy: 1}


def test_avro_values_decode(spark, bootstrap, tmp_path):
    import io

    import fastavro

    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "id", "type": "long"}, {"name": "tag", "type": ["null", "string"]}],
    }
    parsed = fastavro.parse_schema(schema)
    values = []
    for i in range(8):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, {"id": i, "tag": None if i % 2 else f"t{i}"})
        values.append(out.getvalue())
    topic = create_topic(bootstrap, partitions=1)
    produce(bootstrap, topic, values)
    rows = _read_all(
        spark,
        bootstrap,
        tmp_path,
        subscribe=topic,
        startingOffsets="earliest",
        **{"value.format": "avro", "value.schema": json.dumps(schema)},
    )
    expected = [(i, None if i % 2 else f"t{i}") for i in range(8)]
    assert sorted((r.id, r.tag) for r in rows) == expected


def test_undecodable_avro_and_tombstones_follow_the_error_policy(spark, bootstrap, tmp_path):
    """fastavro reads b"\\x01\\x02garbage-not-avro" as id=-1, name='g' (it stops after one
    record), and a tombstone has no record: both go to the policy, named by offset; skips are
    counted in query progress, dead letters keep the raw value and the reason."""
    import io

    import fastavro

    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
    }

    def avro(i: int) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(schema), {"id": i, "name": f"n{i}"})
        return out.getvalue()

    garbage = b"\x01\x02garbage-not-avro"
    topic = create_topic(bootstrap, partitions=1)
    dead = create_topic(bootstrap, partitions=1)
    produce(bootstrap, topic, [avro(0), avro(1), garbage, None, avro(4), avro(5)])
    base = {"subscribe": topic, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "4"}
    base |= {"value.format": "avro", "value.schema": json.dumps(schema)}
    with pytest.raises(Exception, match=rf"bad input at {topic}\[0\] offset 2: .* after the"):
        _read_all(spark, bootstrap, tmp_path / "fail", **base)
    rows, query = _run(spark, bootstrap, tmp_path / "skip", errors="skip", **base)
    assert sorted((r.id, r.name) for r in rows) == [(i, f"n{i}") for i in (0, 1, 4, 5)]
    # Progress of the second batch (offsets 4-5) counts the first batch's skips.
    reported = json.loads(query.recentProgress[-1]["sources"][0]["latestOffset"])
    assert reported["offset"] == {"skipped": 2, "quarantined": 0}
    _read_all(
        spark, bootstrap, tmp_path / "q", errors="quarantine", **base, **{"errors.topic": dead}
    )
    letters = read_committed(bootstrap, dead)
    assert [(r.value, dict(r.headers)["firesteel.offset"]) for r in letters] == [
        (garbage, b"2"),
        (None, b"3"),
    ]
    assert b"null value (a tombstone)" in dict(letters[1].headers)["firesteel.reason"]


def test_json_null_values_follow_the_error_policy_not_rows_of_nulls(spark, bootstrap, tmp_path):
    """A JSON null (which pyarrow's reader cannot even take first in a block) and a tombstone
    are no objects of value.schema: skipped and counted, never a row of nulls."""
    topic = create_topic(bootstrap, partitions=1)
    produce(bootstrap, topic, [b"null", b'{"id": 1}', None, b'{"id": 3}'])
    rows = _read_all(
        spark,
        bootstrap,
        tmp_path,
        subscribe=topic,
        startingOffsets="earliest",
        errors="skip",
        **{"value.format": "json", "value.schema": "id BIGINT, name STRING"},
    )
    assert sorted(r.id for r in rows) == [1, 3]


def test_starting_timestamp(spark, bootstrap, tmp_path):
    """offsets_for_times: records stamped (CreateTime) before the cut are not read."""
    topic = create_topic(bootstrap, partitions=1)
    cut = 1_700_000_000_000
    produce(bootstrap, topic, [b"old"] * 5, timestamp=cut - 1)
    produce(bootstrap, topic, [b"new"] * 3, timestamp=cut)
    rows = _read_all(spark, bootstrap, tmp_path, subscribe=topic, startingTimestamp=str(cut))
    assert [r.value for r in rows] == [b"new"] * 3


def test_offsets_deleted_by_retention_fail_clearly(spark, bootstrap, tmp_path):
    """DeleteRecords moves the log start."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = create_topic(bootstrap, partitions=1)
    produce(bootstrap, topic, [str(i).encode() for i in range(10)])
    start = json.dumps({topic: {"0": 0}})
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 4)]).values():
        future.result(30)
    with pytest.raises(Exception, match="deleted from the log"):
        _read_all(spark, bootstrap, tmp_path / "a", subscribe=topic, startingOffsets=start)
    rows = _read_all(
        spark,
        bootstrap,
        tmp_path / "b",
        subscribe=topic,
        startingOffsets=start,
        failOnDataLoss="false",
    )
    assert sorted(int(r.value) for r in rows) == list(range(4, 10))


def test_a_batch_records_how_old_its_oldest_record_was_and_what_it_read(spark, bootstrap, tmp_path):
    """Records stamped an hour ago, read into firesteel's file sink in one batch: its record
    keeps the age of the oldest one when fetched (Flink's fetch event-time lag), the rows
    the reader produced, and the read as a phase of the batch; Prometheus and status show
    the age."""
    import subprocess
    import sys
    import time

    from firesteel.core.metrics import read_history

    topic = create_topic(bootstrap, partitions=2)
    stamped = time.time()
    hour_ago_ms = int((stamped - 3600) * 1000)
    produce(bootstrap, topic, [b"old-0", b"old-1"], timestamp=hour_ago_ms, partition=0)
    produce(bootstrap, topic, [b"new-0"], partition=1)
    checkpoint = tmp_path / "ck"
    query = (
        _reader(spark, bootstrap, checkpoint, {"subscribe": topic, "startingOffsets": "earliest"})
        .load()
        .select("value")
        .writeStream.format("firesteel.files")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    (records,) = read_history(str(checkpoint)).values()
    (record,) = records
    age = record.maxima["oldest_record_age_seconds"]
    # Fetched after the stamps were made, and before now: the bounds of its age.
    assert 3600 <= age <= 3600 + (time.time() - stamped) + 1
    assert record.counters["read_rows"] == record.input_rows == 3
    assert record.read_seconds is not None and record.read_seconds > 0

    (family,) = [
        f
        for f in CheckpointCollector({"q": str(checkpoint)}).collect()
        if f.name == "firesteel_sink_last_oldest_record_age_seconds"
    ]
    assert [s.value for s in family.samples] == [age]
    shown = subprocess.run(
        [sys.executable, "-m", "firesteel.cli.main", "status", str(checkpoint)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert f"the oldest record batch 0 read was {age:,.1f} s old when fetched" in shown
