"""The plain Kafka sink: ``guarantee`` none or at-least-once."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import ClassVar

import pyarrow as pa

from firesteel.core.spi import PlainSink, TaskScope
from firesteel.core.toolkit import has_committed
from firesteel.kafka.config import client_config, redact
from firesteel.kafka.options import KafkaSinkOptions
from firesteel.kafka.outage import Outage
from firesteel.kafka.pool import SharedProducers
from firesteel.kafka.produce_args import sink_extractor
from firesteel.kafka.producing import flush, produce_all
from firesteel.kafka.sink import brokers
from firesteel.kafka.sink.points import AFTER_FLUSH, AFTER_PRODUCE

logger = logging.getLogger(__name__)

_PRODUCERS = SharedProducers()
"""This worker's plain producers, shared by its tasks of the same configuration."""


class KafkaSink(PlainSink):
    """``guarantee`` none / at-least-once: produce and (at-least-once) confirm every record.

    With at-least-once the task returns only after every record's delivery
    report came back without error (``acks=all`` and idempotence by default),
    so a resettable source makes the query at-least-once. ``none`` flushes but
    only logs failed deliveries. Brokers away for a while are waited out for
    option ``retry.timeout.ms`` (:mod:`firesteel.kafka.outage`): the records stay
    queued in the producer, which sends them once the brokers are back.

    ``checkpoint`` is the query's: one that committed a batch waits out an outage
    in its driver's check of the cluster too, instead of failing at once.
    """

    name: ClassVar[str] = "firesteel.kafka"

    def __init__(self, options: KafkaSinkOptions, sink_id: str, checkpoint: str = "") -> None:
        self.options = options
        self.sink_id = sink_id
        self.checkpoint = checkpoint
        self.checked = options.guarantee is None or options.guarantee.value > 0
        self.config = client_config(options.passthrough)
        if self.checked:
            self.config = {"acks": "all", "enable.idempotence": True, **self.config}

    def prepare(self) -> None:
        resumed = has_committed(self.checkpoint)
        brokers.reach(self.config, self.options.retry_timeout_ms if resumed else None)
        logger.info("firesteel.kafka sink %s: producer %s", self.sink_id, redact(self.config))

    def write(self, scope: TaskScope, batches: Iterator[pa.RecordBatch]) -> int:
        producer, tracker = _PRODUCERS.get(self.config)
        extractor = sink_extractor(self.options, producer)
        rows = 0
        for batch in batches:
            args = extractor.extract(batch)
            produce_all(producer, args)
            rows += len(args)
        AFTER_PRODUCE.fire(scope.batch_id, scope.partition_id)
        what = f"batch {scope.batch_id} partition {scope.partition_id}"
        if self.checked:
            outage = Outage("firesteel.kafka sink", self.config, self.options.retry_timeout_ms)
            flush(producer, tracker, self.options.flush_timeout_ms, what, outage)
        else:
            remaining = producer.flush(self.options.flush_timeout_ms / 1000)
            if tracker.failed or remaining:
                logger.warning(
                    "firesteel.kafka sink (guarantee none): %s: %d records not delivered",
                    what,
                    tracker.failed + remaining,
                )
        AFTER_FLUSH.fire(scope.batch_id, scope.partition_id)
        return rows
