"""Every fault point the Kafka crash tests and soak command arm is one the library declares;
a kill at the point of the write-ahead commit that no longer writes a record."""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
from test_kafka_crash import together_kills

from firesteel.core.context import TaskScope
from firesteel.core.options import parse_options
from firesteel.kafka.options import PASSTHROUGH, KafkaSinkOptions
from firesteel.kafka.sink import KafkaWriteAheadSink
from firesteel.kafka.sink.points import AFTER_FLUSH, AFTER_PRODUCE
from firesteel.kafka.source import AFTER_INITIAL_OFFSET
from firesteel.testing.kafka import create_topic, read_committed
from firesteel.testing.kafka.soak import POINTS
from firesteel.testing.points import registered


def test_the_kafka_points_are_declared_and_found_through_the_entry_points() -> None:
    known = registered()
    for point in (AFTER_PRODUCE, AFTER_FLUSH, AFTER_INITIAL_OFFSET):
        assert known[point.name] is point


def test_every_point_the_crash_tests_and_soak_arm_is_declared(tmp_path: Path) -> None:
    armed = {
        spec.split("@")[0].split("#")[0]
        for kill in together_kills(tmp_path)
        for spec in getattr(kill, "specs", ())
    }
    armed.update(point for points in POINTS.values() for point in points)
    assert armed <= set(registered()), armed - set(registered())


SEND_THEN_KILL = """
import os, pickle, signal, sys
from firesteel.core.faults import install_handler
from firesteel.core.options import parse_options
from firesteel.kafka.options import PASSTHROUGH, KafkaSinkOptions
from firesteel.kafka.sink import KafkaWriteAheadSink

raw, sink_id, checkpoint, batch_id, votes = pickle.load(open(sys.argv[1], "rb"))

def kill_after_the_first_send(point, batch, partition):
    if point.name == "wal.after_send" and partition == 0:
        os.kill(os.getpid(), signal.SIGKILL)

install_handler(kill_after_the_first_send)
options = parse_options(KafkaSinkOptions, raw, passthrough_prefixes=PASSTHROUGH)
sink = KafkaWriteAheadSink(options, sink_id, checkpoint)
sink.prepare()
sink.commit_batch(batch_id, votes)
"""


def test_a_kill_right_after_a_segment_is_sent_neither_loses_nor_repeats_it(
    bootstrap, tmp_path: Path, worker_pool
) -> None:
    """The write-ahead mode's commit of a batch of two segments, in a driver process
    SIGKILLed right after the first segment's transaction committed (``wal.after_send``:
    where a marker file in the checkpoint used to record the send, and now nothing does),
    then committed again by a new driver: a plain ``read_committed`` consumer sees each row
    once, and the checkpoint holds no record of the send beside Kafka's marker."""
    topic = create_topic(bootstrap, partitions=1)
    raw = {"kafka.bootstrap.servers": bootstrap, "topic": topic, "guarantee": "exactly-once"}
    options = parse_options(KafkaSinkOptions, raw, passthrough_prefixes=PASSTHROUGH)
    checkpoint = str(tmp_path / "checkpoint")
    sink = KafkaWriteAheadSink(options, f"killed-{topic}", checkpoint)
    sink.prepare()
    rows = {0: [b"a0", b"a1", b"a2"], 1: [b"b0", b"b1"]}
    votes = [
        sink.write_partition(
            TaskScope(sink.query_id, 4, partition, 0),
            iter([pa.RecordBatch.from_pydict({"value": values})]),
        )
        for partition, values in rows.items()
    ]
    arguments = tmp_path / "commit.pickle"
    arguments.write_bytes(pickle.dumps((raw, sink.sink_id, checkpoint, 4, votes)))

    driver = subprocess.run(
        [sys.executable, "-c", SEND_THEN_KILL, str(arguments)], check=False, capture_output=True
    )
    assert driver.returncode == -signal.SIGKILL, driver.stderr.decode()[-2000:]
    assert sorted(r.value for r in read_committed(bootstrap, topic)) == rows[0]

    sink.commit_batch(4, votes)  # the restarted driver's commit of the same batch
    assert sorted(r.value for r in read_committed(bootstrap, topic)) == rows[0] + rows[1]
    assert not list(Path(checkpoint).rglob("*.committed"))
