"""Handing rows to librdkafka: the call form, a full queue, a producer that turns unusable.

These use a real confluent-kafka producer pointed at a closed port: records
wait in librdkafka's local queue and time out there, which is all the queue
handling needs.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from firesteel.core.errors import SinkError
from firesteel.kafka.produce_args import UNASSIGNED, RowExtractor
from firesteel.kafka.producing import DeliveryTracker, flush, produce_all, tracked_config
from firesteel.testing.ports import free_port


def _producer(tracker: DeliveryTracker, queue: int) -> Any:
    config = {
        # Nothing listens there: records stay queued until message.timeout.ms.
        "bootstrap.servers": f"127.0.0.1:{free_port()}",
        "queue.buffering.max.messages": queue,
        "message.timeout.ms": 50,
        "log_level": 0,
    }
    return Producer(tracked_config(config, tracker))


def test_rows_without_timestamp_and_headers_take_the_positional_form():
    values = pa.array([b"a", b"b"])
    plain = RowExtractor("t", None).extract(pa.record_batch({"value": values}))
    assert plain.positional
    assert list(plain.rows()) == [("t", b"a", None, UNASSIGNED), ("t", b"b", None, UNASSIGNED)]
    stamped = RowExtractor("t", None).extract(
        pa.record_batch({"value": values, "timestamp": pa.array([5, 6], pa.int64())})
    )
    assert not stamped.positional
    assert list(stamped.rows()) == [
        ("t", b"a", None, UNASSIGNED, 5, None),
        ("t", b"b", None, UNASSIGNED, 6, None),
    ]


def test_a_full_queue_is_waited_out_and_every_row_is_handed_over():
    tracker = DeliveryTracker({})
    producer = _producer(tracker, queue=10)
    args = RowExtractor("t", None).extract(pa.record_batch({"value": [b"x"] * 35}))
    produce_all(producer, args, tracker, "test")
    # Every record was accepted by librdkafka, then timed out there: 35 failed
    # delivery reports, none lost on the way in.
    with pytest.raises(SinkError, match="35 records were not acknowledged"):
        flush(producer, tracker, 5_000, "test")


class _FencedOnFirstReport(DeliveryTracker):
    def on_delivery(self, err: Any, msg: Any) -> None:
        super().on_delivery(err, msg)
        self.fenced = True


def test_a_producer_fenced_while_waiting_for_queue_space_is_not_called_again():
    tracker = _FencedOnFirstReport({})
    producer = _producer(tracker, queue=10)
    args = RowExtractor("t", None).extract(pa.record_batch({"value": [b"x"] * 35}))
    with pytest.raises(SinkError, match="fenced"):
        produce_all(producer, args, tracker, "test")
    assert tracker.failed < 35


def test_an_unusable_producer_gets_no_row():
    tracker = DeliveryTracker({}, fatal="fenced earlier")
    producer = _producer(tracker, queue=10)
    args = RowExtractor("t", None).extract(pa.record_batch({"value": [b"x"]}))
    with pytest.raises(SinkError, match="fenced earlier"):
        produce_all(producer, args, tracker, "test")
    # A row handed over would time out within 50 ms and come back as a failed report.
    producer.poll(0.5)
    assert tracker.failed == 0
