"""The Kafka sinks against a real broker: columns, encodings, transactions, fencing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from kafka_support import check_with_read_committed

from firesteel.core.checkpoint import read_guarantee
from firesteel.core.context import TaskScope
from firesteel.core.errors import ConfigError, SinkError
from firesteel.core.options import parse_options
from firesteel.core.sink import CommitOutcome
from firesteel.kafka.options import PASSTHROUGH, KafkaSinkOptions
from firesteel.kafka.pool import TransactionalPool
from firesteel.kafka.sink import (
    KafkaCommittable,
    KafkaExactlyOnceSink,
    KafkaWriteAheadSink,
    transactions,
)
from firesteel.kafka.sink.marker import committed_marker
from firesteel.testing.kafka import create_topic, produce, read_log

pytestmark = pytest.mark.usefixtures("worker_pool")


def _write(spark, bootstrap: str, tmp_path: Path, df_sql: str, **options: str) -> None:
    source = create_topic(bootstrap, partitions=1)
    produce(bootstrap, source, [b"tick"])
    stream = (
        spark.readStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .load()
    )
    stream.createOrReplaceTempView("ticks")
    writer = (
        spark.sql(df_sql)
        .writeStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.start().awaitTermination(120)


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once", "none"])
def test_columns_reach_kafka(spark, bootstrap, tmp_path, guarantee):
    out = create_topic(bootstrap, partitions=3)
    other = create_topic(bootstrap, partitions=1)
    _write(
        spark,
        bootstrap,
        tmp_path,
        f"""select CAST(concat('k', id) AS BINARY) AS key, CAST(concat('v', id) AS BINARY) AS value,
                   CAST(id % 3 AS INT) AS partition,
                   CASE WHEN id = 9 THEN '{other}' ELSE NULL END AS topic,
                   timestamp_millis(1700000000000 + id) AS timestamp,
                   array(named_struct('key', 'h', 'value', CAST(id AS STRING))) AS headers
            from ticks lateral view explode(sequence(0, 9)) AS id""",
        topic=out,
        guarantee=guarantee,
    )
    view = read_log(bootstrap, out)
    assert sorted(r.value for r in view.committed) == sorted(f"v{i}".encode() for i in range(9))
    for record in view.committed:
        index = int(record.value[1:])
        assert record.key == f"k{index}".encode()
        assert record.partition == index % 3
        assert record.headers == (("h", str(index).encode()),)
        assert record.transactional == (guarantee == "exactly-once")
    assert read_log(bootstrap, other).values == [b"v9"]
    # "none" is at-most-once, never mistaken for "not set" (which means at-least-once).
    (record,) = read_guarantee(str(tmp_path / "ck")).values()
    expected = {"none": "at-most-once"}.get(guarantee, guarantee)
    assert record["required"] == expected


def test_json_and_avro_value_encoding_and_custom_partitioner(spark, bootstrap, tmp_path):
    import io

    import fastavro

    # Python workers import the partitioner from the shipped helper module.
    spark.sparkContext.addPyFile(str(Path(__file__).parent / "kafka_support.py"))
    out = create_topic(bootstrap, partitions=4)
    _write(
        spark,
        bootstrap,
        tmp_path / "json",
        "select CAST(CAST(id AS STRING) AS BINARY) AS key, id, concat('n', id) AS name "
        "from ticks lateral view explode(sequence(0, 7)) AS id",
        topic=out,
        partitioner="kafka_support:partition_by_last_digit",
        **{"value.format": "json"},
    )
    view = read_log(bootstrap, out)
    decoded = sorted((r.value.decode(), r.partition) for r in view.committed)
    expected = [(json.dumps({"id": i, "name": f"n{i}"}).replace(" ", ""), i % 4) for i in range(8)]
    assert decoded == sorted(expected)

    schema = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}
    avro_out = create_topic(bootstrap, partitions=1)
    _write(
        spark,
        bootstrap,
        tmp_path / "avro",
        "select id from ticks lateral view explode(sequence(0, 4)) AS id",
        topic=avro_out,
        guarantee="exactly-once",
        **{"value.format": "avro", "value.schema": json.dumps(schema)},
    )
    parsed = fastavro.parse_schema(schema)
    ids = [
        fastavro.schemaless_reader(io.BytesIO(v), parsed, None)["id"]
        for v in read_log(bootstrap, avro_out).values
    ]
    assert sorted(ids) == list(range(5))


def _sink(bootstrap: str, topic: str, **extra: str) -> KafkaExactlyOnceSink:
    raw = {"kafka.bootstrap.servers": bootstrap, "topic": topic, "guarantee": "exactly-once"}
    raw.update(extra)
    options = parse_options(KafkaSinkOptions, raw, passthrough_prefixes=PASSTHROUGH)
    # One sink id per topic, so per test: tests on one broker share no transactional id or
    # marker group, and none meets a transaction another test left behind.
    return KafkaExactlyOnceSink(options, sink_id=f"fence-{topic}")


def _batch(prefix: str, rows: int = 5) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"value": [f"{prefix}{i}".encode() for i in range(rows)]})


def test_two_writers_with_one_transactional_id_the_older_is_fenced(bootstrap):
    topic = create_topic(bootstrap, partitions=1)
    sink = _sink(bootstrap, topic)
    sink.prepare()
    scope = TaskScope(query_id="q", batch_id=3, partition_id=0, attempt=0)
    older = sink.begin_transaction(scope)
    sink.write(older, _batch("zombie"))
    older.producer.flush(30)
    newer_scope = TaskScope(query_id="q", batch_id=3, partition_id=0, attempt=1)
    newer = sink.begin_transaction(newer_scope)
    sink.write(newer, _batch("live"))
    handle = sink.pre_commit(newer)
    assert handle.rows == 5 and not handle.skipped
    with pytest.raises(SinkError, match=r"fatal|abortable|not acknowledged"):
        sink.write(older, _batch("zombie-more"))
        sink.pre_commit(older)
    sink.abort_transaction(older)
    view = read_log(bootstrap, topic)
    assert sorted(view.values) == sorted(f"live{i}".encode() for i in range(5))
    assert not any(r.value.startswith(b"zombie") for r in view.committed)
    assert not any(r.value.startswith(b"zombie") for r in view.pending)


def test_a_rerun_of_a_committed_batch_writes_nothing(bootstrap):
    topic = create_topic(bootstrap, partitions=1)
    sink = _sink(bootstrap, topic)
    for attempt in range(2):
        scope = TaskScope(query_id="q", batch_id=7, partition_id=2, attempt=attempt)
        vote = sink.write_partition(scope, iter([_batch("r")]))
        assert vote.committable(KafkaCommittable).skipped == (attempt == 1)
    earlier = TaskScope(query_id="q", batch_id=6, partition_id=2, attempt=0)
    assert (
        sink.write_partition(earlier, iter([_batch("old")])).committable(KafkaCommittable).skipped
    )
    assert sorted(read_log(bootstrap, topic).values) == sorted(f"r{i}".encode() for i in range(5))


def test_the_in_task_commit_reports_a_rerun_as_already_committed(bootstrap):
    topic = create_topic(bootstrap, partitions=1)
    sink = _sink(bootstrap, topic)
    votes = [
        sink.write_partition(TaskScope("q", 3, partition, 0), iter([_batch(f"p{partition}-")]))
        for partition in range(2)
    ]
    assert sink.commit(3, [v.committable(KafkaCommittable) for v in votes]) is (
        CommitOutcome.COMMITTED
    )
    rerun = [
        sink.write_partition(TaskScope("q", 3, partition, 1), iter([_batch("again")]))
        for partition in range(2)
    ]
    handles = [v.committable(KafkaCommittable) for v in rerun]
    assert all(h.skipped for h in handles)
    assert sink.commit(3, handles) is CommitOutcome.ALREADY_COMMITTED
    assert not any(v.startswith(b"again") for v in read_log(bootstrap, topic).values)


def test_exactly_once_options_are_validated(bootstrap):
    with pytest.raises(ConfigError, match=r"transaction\.timeout\.ms"):
        _sink(bootstrap, "x", **{"kafka.transaction.timeout.ms": "3600000"})
    with pytest.raises(ConfigError, match=r"'topic' or 'marker\.topic'"):
        parse_options(
            KafkaSinkOptions,
            {"kafka.bootstrap.servers": bootstrap, "guarantee": "exactly-once"},
            passthrough_prefixes=PASSTHROUGH,
        )
    with pytest.raises(ConfigError, match="Did you mean 'topic'"):
        parse_options(
            KafkaSinkOptions,
            {"kafka.bootstrap.servers": bootstrap, "topci": "x"},
            passthrough_prefixes=PASSTHROUGH,
        )


def test_the_exactly_once_mode_and_its_send_option_are_validated(bootstrap):
    def options(**extra: str) -> KafkaSinkOptions:
        raw = {"kafka.bootstrap.servers": bootstrap, "topic": "t", "guarantee": "exactly-once"}
        return parse_options(KafkaSinkOptions, {**raw, **extra}, passthrough_prefixes=PASSTHROUGH)

    assert options().exactly_once_mode == "write-ahead"
    assert options(**{"send.connect": "sc://localhost:15002"}).send_connect
    with pytest.raises(ConfigError, match=r"exactly\.once\.mode"):
        options(**{"exactly.once.mode": "per-task"})
    with pytest.raises(ConfigError, match=r"'send\.connect' .* exactly\.once\.mode write-ahead"):
        options(**{"exactly.once.mode": "in-task", "send.connect": "sc://localhost:15002"})
    with pytest.raises(ConfigError, match=r"option 'send\.connect': .* not a Spark Connect URL"):
        options(**{"send.connect": "localhost:15002"})
    with pytest.raises(ConfigError, match=r"checkpointLocation"):
        KafkaWriteAheadSink(options(), "no-checkpoint", "")


def test_a_missing_marker_topic_is_refused(bootstrap):
    with pytest.raises(ConfigError, match="does not exist"):
        _sink(bootstrap, "no-such-topic-firesteel").prepare()


def test_a_transaction_near_its_timeout_is_aborted_not_left_to_the_broker(bootstrap):
    """The pause lies between the sink's margin (0.8 x 3 s) and the timeout: with a pause
    as long as the timeout, the broker's own periodic abort of timed-out transactions could
    land before the sink's abort (seen once at load 15), fencing the producer."""
    topic = create_topic(bootstrap, partitions=1)
    sink = _sink(bootstrap, topic, **{"kafka.transaction.timeout.ms": "3000"})
    scope = TaskScope(query_id="q", batch_id=1, partition_id=0, attempt=0)

    def slow():
        import time

        yield _batch("slow")
        time.sleep(2.6)
        yield _batch("late")

    with pytest.raises(SinkError, match=r"transaction open .*transaction\.timeout\.ms"):
        sink.write_partition(scope, slow())
    view = read_log(bootstrap, topic)
    assert view.values == [] and not view.pending and len(view.aborted) == 5


def test_init_transactions_retries_are_bounded_and_name_the_transactional_id():
    """No broker answers: retriable timeouts are retried until retry.timeout.ms, then the
    task fails with an OutageError naming its transactional id, the servers and the setting
    instead of hanging."""
    import time

    from firesteel.kafka.errors import OutageError
    from firesteel.testing.kafka import free_port

    servers = f"127.0.0.1:{free_port()}"
    sink = _sink(servers, "t", **{"retry.timeout.ms": "3000"})
    scope = TaskScope(query_id="q", batch_id=2, partition_id=1, attempt=0)
    began = time.monotonic()
    with pytest.raises(OutageError, match=r"firesteel-fence-t-1 batch 2: init_transactions") as e:
        sink.write_partition(scope, iter([_batch("x")]))
    assert f"({servers})" in str(e.value) and "'retry.timeout.ms' (3000 ms)" in str(e.value)
    assert time.monotonic() - began < 60


class _MarkerReads:
    """A marker consumer whose ``committed()`` reply carries the given partition errors
    first (as librdkafka returns an error the broker gives for one partition), then the
    marker of batch 3. No broker here returns such errors on demand."""

    def __init__(self, *errors: object) -> None:
        self.errors = list(errors)

    def committed(self, partitions: list[object], timeout: float) -> list[object]:
        from types import SimpleNamespace

        error = self.errors.pop(0) if self.errors else None
        return [SimpleNamespace(offset=-1001 if error else 4, metadata=None, error=error)]


def test_a_marker_read_with_a_partition_error_is_never_taken_for_no_marker():
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    partition = TopicPartition("t", 0)
    loading = _MarkerReads(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))
    assert committed_marker(loading, partition, 10).offset == 4
    denied = _MarkerReads(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))
    with pytest.raises(KafkaException, match="GROUP_AUTHORIZATION_FAILED"):
        committed_marker(denied, partition, 10)


def test_a_sink_id_shared_by_two_queries_is_refused(bootstrap):
    topic = create_topic(bootstrap, partitions=1)
    sink = _sink(bootstrap, topic)
    first = TaskScope(query_id="query-a", batch_id=0, partition_id=0, attempt=0)
    assert (
        not sink.write_partition(first, iter([_batch("a")])).committable(KafkaCommittable).skipped
    )
    later = TaskScope(query_id="query-a", batch_id=1, partition_id=0, attempt=0)
    assert (
        not sink.write_partition(later, iter([_batch("b")])).committable(KafkaCommittable).skipped
    )
    other = TaskScope(query_id="query-b", batch_id=0, partition_id=0, attempt=0)
    with pytest.raises(
        ConfigError,
        match=rf"sink 'fence-{topic}' .* belongs to Spark query query-a.*'sink\.new\.stream'",
    ):
        sink.write_partition(other, iter([_batch("c")]))
    values = read_log(bootstrap, topic).values
    assert sorted(values) == sorted(
        [f"a{i}".encode() for i in range(5)] + [f"b{i}".encode() for i in range(5)]
    )


def test_a_marker_still_completing_is_waited_for_never_read_as_absent(bootstrap):
    """The race behind a second query not being refused: its first task reads the marker
    group while the first query's transaction carrying the marker is still completing.
    Here that moment is held open on purpose: a transaction (another transactional id, so
    nothing fences it) has set the marker to "query-a committed batch 0" and commits only a
    second after query-b's task starts. The sink's marker reader asks for stable offsets
    (``isolation.level=read_committed``), so it waits, then sees query-a's marker and
    refuses; a reader that read the pending marker as absent would write query-b's batch."""
    import threading

    from confluent_kafka import Consumer, Producer, TopicPartition

    from firesteel.kafka.sink.marker import marker_metadata

    topic = create_topic(bootstrap, partitions=1)
    sink = _sink(bootstrap, topic)
    sink.prepare()
    holder = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"holder-{topic}"})
    holder.init_transactions(30)
    holder.begin_transaction()
    group = Consumer({"bootstrap.servers": bootstrap, "group.id": sink.names.marker_group(0)})
    marker = TopicPartition(sink.marker_topic, 0, 1, marker_metadata("query-a", "holder"))
    holder.send_offsets_to_transaction([marker], group.consumer_group_metadata(), 30)
    group.close()
    commit = threading.Timer(1.0, holder.commit_transaction, args=(30,))
    commit.start()
    other = TaskScope(query_id="query-b", batch_id=0, partition_id=0, attempt=0)
    try:
        with pytest.raises(ConfigError, match=r"belongs to Spark query query-a"):
            sink.write_partition(other, iter([_batch("b")]))
    finally:
        commit.join()
    assert _values(bootstrap, topic) == []


def _values(bootstrap: str, topic: str) -> list[bytes]:
    """What a read_committed reader sees: the raw log's view, and on Apache Kafka also a
    plain read_committed consumer's (the broker's own isolation), which must agree."""
    view = read_log(bootstrap, topic)
    check_with_read_committed(bootstrap, topic, view)
    return sorted(v for v in view.values if v is not None)


def _expected(*prefixes: str) -> list[bytes]:
    return sorted(f"{p}{i}".encode() for p in prefixes for i in range(5))


def _write_batch(sink: KafkaExactlyOnceSink, batch_id: int, prefix: str) -> KafkaCommittable:
    scope = TaskScope(query_id="q", batch_id=batch_id, partition_id=0, attempt=0)
    return sink.write_partition(scope, iter([_batch(prefix)])).committable(KafkaCommittable)


def test_a_kept_producer_serves_the_next_batch_of_its_partition(bootstrap, worker_pool):
    topic = create_topic(bootstrap, partitions=1)
    sink = _sink(bootstrap, topic)
    _write_batch(sink, 0, "a")
    (kept,) = worker_pool.idle.values()
    producer = kept.producer
    _write_batch(sink, 1, "b")
    (after,) = worker_pool.idle.values()
    assert after is kept and after.producer is producer
    assert _values(bootstrap, topic) == _expected("a", "b")
    assert not read_log(bootstrap, topic).pending


def test_a_kept_producer_fenced_in_another_worker_starts_over_without_failing(
    bootstrap, monkeypatch, caplog, new_worker
):
    """The same Spark partition alternates between two Python workers, so each worker's
    kept producer was fenced by the other's init_transactions: the marker names the other
    producer, and the kept one is not even tried. A re-run of a committed batch in the
    other worker fences without committing: the kept producer is tried, refused as fenced
    before it produced anything, and replaced. Every task succeeds; every batch is
    written once."""
    import logging

    caplog.set_level(logging.DEBUG, logger="firesteel.kafka.sink")
    topic = create_topic(bootstrap, partitions=1)
    sink = _sink(bootstrap, topic)
    workers = [new_worker(), new_worker()]

    def on(worker: TransactionalPool, batch_id: int, prefix: str) -> bool:
        monkeypatch.setattr(transactions, "_TRANSACTIONAL", worker)
        before = [c.producer for c in worker.idle.values()]
        skipped = _write_batch(sink, batch_id, prefix).skipped
        (client,) = worker.idle.values()
        assert client.producer not in before or skipped, "a fenced producer was kept"
        return skipped

    for batch_id in range(4):
        assert not on(workers[batch_id % 2], batch_id, f"b{batch_id}-")
    assert caplog.text.count("kept producer superseded") == 2
    assert "cannot go on" not in caplog.text

    assert on(new_worker(), 3, "again-")  # fences worker 1's kept producer, commits nothing
    assert not on(workers[1], 4, "b4-")
    assert "send_offsets_to_transaction failed (fatal)" in caplog.text
    assert _values(bootstrap, topic) == _expected(*(f"b{b}-" for b in range(5)))


def test_the_sole_senders_kept_producer_knows_its_marker_and_fencing_still_guards_it(
    bootstrap, monkeypatch, caplog, new_worker
):
    """The write-ahead mode's driver sends every transaction of its sink, so its kept
    producer takes the marker from its own last transaction instead of reading it. Another
    instance sending a batch meanwhile (a second driver) fences it: its next transaction is
    refused before anything is produced, and the new producer reads the marker and skips
    the batch the other one sent. Every batch is written once."""
    import logging

    caplog.set_level(logging.DEBUG, logger="firesteel")
    topic = create_topic(bootstrap, partitions=1)
    sink = _sink(bootstrap, topic)
    sink.sole_sender = True
    driver = new_worker()

    def send(worker: TransactionalPool, batch_id: int, prefix: str) -> tuple[bool, int]:
        monkeypatch.setattr(transactions, "_TRANSACTIONAL", worker)
        caplog.clear()
        skipped = _write_batch(sink, batch_id, prefix).skipped
        return skipped, caplog.text.count("timing kafka.marker_read")

    assert send(driver, 0, "b0-") == (False, 1)  # a new producer reads it
    assert send(driver, 1, "b1-") == (False, 0)  # kept: known from batch 0's transaction
    assert send(driver, 1, "again-") == (True, 0)  # a re-run of batch 1: skipped, unread
    assert send(new_worker(), 2, "b2-") == (False, 1)  # another driver fences the kept one
    assert send(driver, 2, "twice-") == (True, 1)  # refused, replaced; the new one reads
    assert "cannot go on" in caplog.text
    assert send(driver, 3, "b3-") == (False, 0)
    assert _values(bootstrap, topic) == _expected("b0-", "b1-", "b2-", "b3-")


def test_a_zombie_holding_the_marker_sends_a_kept_producer_to_a_new_one(
    bootstrap, monkeypatch, new_worker
):
    """A zombie attempt of batch 1 (another worker) holds the partition's marker in its
    open transaction. The kept producer cannot read the marker, starts over with a new
    producer, whose init_transactions aborts the zombie; the zombie cannot commit."""
    topic = create_topic(bootstrap, partitions=1)
    sink = _sink(bootstrap, topic)
    worker = new_worker()
    monkeypatch.setattr(transactions, "_TRANSACTIONAL", worker)
    _write_batch(sink, 0, "first")
    (kept,) = worker.idle.values()

    monkeypatch.setattr(transactions, "_TRANSACTIONAL", new_worker())
    zombie = sink.begin_transaction(TaskScope(query_id="q", batch_id=1, partition_id=0, attempt=0))
    sink.write(zombie, _batch("zombie"))
    zombie.producer.flush(30)

    monkeypatch.setattr(transactions, "_TRANSACTIONAL", worker)
    assert not _write_batch(sink, 1, "live").skipped
    (client,) = worker.idle.values()
    assert client.producer is not kept.producer
    with pytest.raises(SinkError, match=r"fatal|abortable|fenced"):
        sink.pre_commit(zombie)
    sink.abort_transaction(zombie)
    assert _values(bootstrap, topic) == _expected("first", "live")
    view = read_log(bootstrap, topic)
    assert not view.pending
    assert not any(r.value.startswith(b"zombie") for r in view.committed)


def test_a_recreated_checkpoint_is_refused_unless_declared_a_new_stream(spark, bootstrap, tmp_path):
    """The default sink id follows the output topic, so the same Kafka -> Kafka job on a
    deleted and recreated checkpoint finds its own commit markers and is refused instead
    of writing every record again; counted by a plain read_committed consumer."""
    from pyspark.errors import StreamingQueryException

    from firesteel.testing.kafka import read_committed

    source = create_topic(bootstrap, partitions=1)
    out = create_topic(bootstrap, partitions=1)
    produce(bootstrap, source, [f"r{i}".encode() for i in range(5)])
    checkpoint = tmp_path / "ck"

    def run(**extra: str) -> None:
        stream = (
            spark.readStream.format("firesteel.kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("checkpointLocation", str(checkpoint))
            .load()
        )
        writer = (
            stream.select("value")
            .writeStream.format("firesteel.kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", out)
            .option("guarantee", "exactly-once")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
        )
        for key, value in extra.items():
            writer = writer.option(key, value)
        writer.start().awaitTermination(120)

    def committed() -> list[bytes]:
        return sorted(r.value for r in read_committed(bootstrap, out) if r.value is not None)

    once = sorted(f"r{i}".encode() for i in range(5))
    run()
    assert committed() == once
    shutil.rmtree(checkpoint)
    with pytest.raises(StreamingQueryException) as refused:
        run()
    error = str(refused.value)
    assert "ConfigError" in error and "firesteel.kafka" in error and out in error
    assert "'sink.new.stream'" in error
    assert committed() == once
    shutil.rmtree(checkpoint)
    run(**{"sink.new.stream": "true"})
    assert committed() == sorted(once * 2)


def test_the_runtime_needs_no_second_kafka_client():
    """``pip install firesteel-kafka`` pulls in no test-only client: kafka-python (the raw-log
    checker's) is no requirement of it, and the sinks import without it or the test tooling."""
    import importlib.metadata
    import subprocess
    import sys

    requires = importlib.metadata.requires("firesteel-kafka") or []
    runtime = [r for r in requires if "extra" not in r]
    assert runtime and not any(r.startswith("kafka-python") for r in runtime), runtime
    code = (
        "import sys; sys.modules['kafka'] = None\n"
        "import firesteel.kafka, firesteel.kafka.sink\n"
        "assert not any(name.startswith('firesteel.testing') for name in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
