"""Driver-side discovery and executor-side range reads, without Spark."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from firesteel.core.errors import ConfigError
from firesteel.core.options import parse_options
from firesteel.core.source import ReadLimit
from firesteel.kafka.options import PASSTHROUGH, KafkaSourceOptions
from firesteel.kafka.reader import OffsetRange
from firesteel.kafka.source import KafkaSource
from firesteel.testing.kafka import create_topic


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    """A folder as Spark leaves it when a query starts: with its query metadata."""
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    (folder / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}) + "\n")
    return folder


def _source(bootstrap: str, checkpoint: Path, **raw: str) -> KafkaSource:
    options = parse_options(
        KafkaSourceOptions,
        {"kafka.bootstrap.servers": bootstrap, "checkpointLocation": str(checkpoint), **raw},
        passthrough_prefixes=PASSTHROUGH,
    )
    return KafkaSource(options)


def _produce_one_batch(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 200})
    for i in range(count):
        producer.produce(topic, str(i).encode(), partition=0)
    assert producer.flush(30) == 0


def test_end_offsets_are_the_log_end_of_a_one_batch_log(bootstrap, checkpoint):
    """One 100-record batch: the end is 100, as ListOffsets says on Apache Kafka (brokers
    that answer the last batch's base offset + 1 instead are met by the fetch probe)."""
    topic = create_topic(bootstrap, partitions=1)
    _produce_one_batch(bootstrap, topic, 100)
    source = _source(bootstrap, checkpoint, subscribe=topic, startingOffsets="earliest")
    try:
        start = source.initial_offset()
        assert start == {topic: {"0": 0}}
        end = source.latest_offset(start, ReadLimit())
        assert end == {topic: {"0": 100}}
        assert source.initial_offset() == start
        latest = _source(bootstrap, checkpoint, subscribe=topic, startingOffsets="latest")
        assert latest.initial_offset() == {topic: {"0": 100}}
        latest.stop()
    finally:
        source.stop()
    listed = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    _, high = listed.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    listed.close()
    assert high == 100


def test_a_range_reads_the_same_records_every_time(bootstrap, checkpoint):
    topic = create_topic(bootstrap, partitions=1)
    _produce_one_batch(bootstrap, topic, 50)
    source = _source(bootstrap, checkpoint, subscribe=topic)
    offsets = OffsetRange(topic, 0, 10, 35)
    first = [b.to_pydict() for b in source.read(offsets)]
    second = [b.to_pydict() for b in source.read(offsets)]
    values = [v for batch in first for v in batch["value"]]
    assert values == [str(i).encode() for i in range(10, 35)]
    assert [v for batch in second for v in batch["value"]] == values
    assert [o for batch in first for o in batch["offset"]] == list(range(10, 35))


def test_commit_reports_progress_to_the_consumer_group(bootstrap, checkpoint):
    topic = create_topic(bootstrap, partitions=2)
    group = f"lag-{topic}"
    source = _source(bootstrap, checkpoint, subscribe=topic, **{"progress.group.id": group})
    try:
        source.commit({topic: {"0": 7, "1": 3}})
        source.commit({topic: {"0": 7, "1": 3}})
    finally:
        source.stop()
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    committed = reader.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
    reader.close()
    assert [tp.offset for tp in committed] == [7, 3]


def test_a_latest_start_is_pinned_in_the_checkpoint_and_never_resolved_again(
    bootstrap, checkpoint, tmp_path
):
    """Spark asks every run of batch 0 for the initial offset: a restart gets the first run's
    start, not a new latest, and reads what was produced in between."""
    topic = create_topic(bootstrap, partitions=1)
    _produce_one_batch(bootstrap, topic, 3)
    first = _source(bootstrap, checkpoint, subscribe=topic)
    try:
        start = first.initial_offset()
    finally:
        first.stop()
    assert start == {topic: {"0": 3}}
    _produce_one_batch(bootstrap, topic, 4)
    restarted = _source(bootstrap, checkpoint, subscribe=topic)
    try:
        assert restarted.initial_offset() == start
        end = restarted.latest_offset(start, ReadLimit())
        ranges = restarted.partitions(start, end)
        read = [o for r in ranges for b in restarted.read(r) for o in b.to_pydict()["offset"]]
    finally:
        restarted.stop()
    assert read == [3, 4, 5, 6]
    elsewhere = _source(bootstrap, tmp_path, subscribe=topic)
    with pytest.raises(ConfigError, match="where Spark has no query metadata"):
        elsewhere.initial_offset()


def test_a_deleted_and_recreated_topic_is_data_loss_not_a_stall(bootstrap, checkpoint):
    """The new log ends before the query's position: failOnDataLoss fires; with it off the
    query continues from the new log's start."""
    from firesteel.kafka.errors import DataLossError
    from firesteel.testing.kafka import delete_topic

    topic = create_topic(bootstrap, partitions=1)
    _produce_one_batch(bootstrap, topic, 5)
    strict = _source(bootstrap, checkpoint, subscribe=topic, startingOffsets="earliest")
    lenient = _source(bootstrap, checkpoint, subscribe=topic, failOnDataLoss="false")
    try:
        end = strict.latest_offset(strict.initial_offset(), ReadLimit())
        assert end == {topic: {"0": 5}}
        delete_topic(bootstrap, topic)
        create_topic(bootstrap, partitions=1, name=topic)
        _produce_one_batch(bootstrap, topic, 2)
        with pytest.raises(DataLossError, match=rf"went back \({topic}\[0\] from 5 to 2\)"):
            strict.latest_offset(end, ReadLimit())
        restart = lenient.latest_offset(end, ReadLimit())
        assert restart == {topic: {"0": 0}} and not lenient.partitions(end, restart)
        after = lenient.latest_offset(restart, ReadLimit())
        (offsets,) = lenient.partitions(restart, after)
        assert [v for b in lenient.read(offsets) for v in b.to_pydict()["value"]] == [b"0", b"1"]
    finally:
        strict.stop()
        lenient.stop()


def test_planning_records_the_committed_positions_lag_behind_the_log_end(bootstrap, checkpoint):
    """latest_offset(start), planning the batch after the one ending at ``start``, records per
    partition how far that committed end is behind the log end the broker reports
    (read_committed), where ``firesteel status`` and Prometheus read it."""
    from prometheus_client.parser import text_string_to_metric_families

    from firesteel.cli.status import query_status, render
    from firesteel.core.metrics.prometheus import serve_prometheus
    from firesteel.testing.ports import free_port

    topic = create_topic(bootstrap, partitions=2)
    for partition, count in ((0, 100), (1, 30)):
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(count):
            producer.produce(topic, str(i).encode(), partition=partition)
        assert producer.flush(30) == 0
    source = _source(bootstrap, checkpoint, subscribe=topic, startingOffsets="earliest")
    try:
        source.latest_offset({topic: {"0": 40, "1": 30}}, ReadLimit())
    finally:
        source.stop()
    (progress,) = query_status(str(checkpoint))["sources"].values()
    assert progress["lag"] == {f"{topic}[0]": 60, f"{topic}[1]": 0}
    assert progress["log_end"] == {f"{topic}[0]": 100, f"{topic}[1]": 30}
    assert progress["lag_total"] == 60
    assert "60 committed records behind the log end" in render(query_status(str(checkpoint)), 0)

    port = free_port()
    server = serve_prometheus(port, {"q": str(checkpoint)})
    try:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as page:
            text = page.read().decode()
    finally:
        server.shutdown()
    (family,) = [
        f for f in text_string_to_metric_families(text) if f.name == "firesteel_source_lag"
    ]
    assert {s.labels["partition"]: s.value for s in family.samples} == {
        f"{topic}[0]": 60,
        f"{topic}[1]": 0,
    }


def test_checkpoint_location_is_needed_only_for_a_start_that_must_be_pinned(bootstrap):
    """earliest and explicit offsets start the same whenever they are resolved: no option
    needed; latest (the default) must be pinned in the query's checkpoint, and without
    checkpointLocation the query is refused naming it."""
    topic = create_topic(bootstrap, partitions=1)
    _produce_one_batch(bootstrap, topic, 5)

    def source(**raw: str) -> KafkaSource:
        options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, **raw}
        parsed = parse_options(KafkaSourceOptions, options, passthrough_prefixes=PASSTHROUGH)
        return KafkaSource(parsed)

    earliest = source(startingOffsets="earliest")
    try:
        start = earliest.initial_offset()
        assert start == {topic: {"0": 0}}
        assert earliest.latest_offset(start, ReadLimit()) == {topic: {"0": 5}}
        earliest.commit({topic: {"0": 5}})
        assert earliest.report_latest_offset() is None
    finally:
        earliest.stop()
    latest = source()
    try:
        with pytest.raises(ConfigError, match=r"startingOffsets='latest'.*'checkpointLocation'"):
            latest.initial_offset()
    finally:
        latest.stop()
