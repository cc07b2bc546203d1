"""Executor side of the source: read one topic-partition offset range into Arrow batches.

A range ``[start, end)`` is read with one ``assign``-ed consumer (no group
membership, no offset commits) in chunks of ``consume(num_messages=...)``.
Under ``read_committed`` librdkafka hides control records and aborted data;
their offsets still count, so the task stops when the consumer's position,
not the last record, reaches ``end``: a range that ends on a commit marker or
an aborted transaction never stalls.

Brokers away for a while (a restart) are waited out for option ``retry.timeout.ms``
from the first sign of the outage to the first record or offset after it
(:class:`~firesteel.kafka.outage.Outage`); librdkafka itself reconnects and fetches
again from the consumer's position, so nothing is skipped or read twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from firesteel.core.toolkit import BadRecord, DeadLetter, ErrorHandler, task_metrics
from firesteel.kafka.codec import ValueDecoder
from firesteel.kafka.config import safe_error
from firesteel.kafka.discovery import consumer_config
from firesteel.kafka.errors import DataLossError, KafkaSourceError
from firesteel.kafka.options import KafkaSourceOptions
from firesteel.kafka.outage import Outage, is_outage
from firesteel.kafka.sourcefolder import source_folder

logger = logging.getLogger(__name__)

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class OffsetRange:
    """One input partition: ``[start, end)`` of ``topic[partition]``. Deterministic, picklable."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def name(self) -> str:
        """``topic[partition]``."""
        return f"{self.topic}[{self.partition}]"


def output_schema(include_headers: bool, decoder: ValueDecoder | None) -> pa.Schema:
    """Spark's Kafka schema; with a decoder, the decoded columns replace ``value``."""
    fields = [pa.field("key", pa.binary())]
    if decoder is None:
        fields.append(pa.field("value", pa.binary()))
    else:
        fields.extend(decoder.schema)
    fields += [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


@dataclass
class BrokersDown:
    """A reading consumer's error callback: the last error saying the brokers are away."""

    reason: str | None = None

    def on_error(self, err: Any) -> None:
        """librdkafka global error callback (lost connections, all brokers down)."""
        if is_outage(err):
            self.reason = err.str()


class RangeReader:
    """Reads one :class:`OffsetRange`; the same range always yields the same records."""

    def __init__(
        self,
        options: KafkaSourceOptions,
        decoder: ValueDecoder | None,
        dead_letter: DeadLetter | None,
        schema: pa.Schema,
    ) -> None:
        self.options = options
        self.decoder = decoder
        self.dead_letter = dead_letter
        self.schema = schema
        self.folder = source_folder(options)

    def read(self, offsets: OffsetRange) -> Iterator[pa.RecordBatch]:
        """Yield the records of ``offsets`` (runs on an executor)."""
        from confluent_kafka import Consumer, TopicPartition

        if offsets.end <= offsets.start:
            return
        config = consumer_config(
            self.options,
            enable_partition_eof=True,
            auto_offset_reset="error",
            group_id="firesteel-reader",
        )
        # librdkafka reports a consumer's lost connections only to its error callback.
        down = BrokersDown()
        consumer = Consumer({**config, "error_cb": down.on_error})
        errors = ErrorHandler(
            self.options.errors,
            f"{offsets.topic}-{offsets.partition}-{offsets.start}",
            self.dead_letter,
        )
        try:
            consumer.assign([TopicPartition(offsets.topic, offsets.partition, offsets.start)])
            yield from self._consume(consumer, config, offsets, errors, down)
            errors.close()
            if (errors.skipped or errors.quarantined) and self.folder is not None:
                self.folder.record_counts(
                    f"{offsets.topic}-{offsets.partition}-{offsets.start}-{offsets.end}",
                    errors.skipped,
                    errors.quarantined,
                )
                logger.warning(
                    "firesteel.kafka: %s offsets [%d, %d): %d bad records skipped, %d quarantined",
                    offsets.name,
                    offsets.start,
                    offsets.end,
                    errors.skipped,
                    errors.quarantined,
                )
        finally:
            consumer.close()

    def _consume(
        self,
        consumer: Any,
        config: dict[str, Any],
        offsets: OffsetRange,
        errors: ErrorHandler,
        down: BrokersDown,
    ) -> Iterator[pa.RecordBatch]:
        from confluent_kafka import KafkaError, TopicPartition

        out_of_range = (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE)
        tp = TopicPartition(offsets.topic, offsets.partition)
        position = offsets.start
        checked_gap = False
        waited_since = time.monotonic()
        outage = Outage("firesteel.kafka", config, self.options.retry_timeout_ms)
        what = f"reading {offsets.name}"
        while position < offsets.end:
            outage.check(what)
            before = position
            # Ask for no more than the range still needs, so consume() returns as soon as
            # the records are there instead of waiting out its timeout for a full chunk.
            wanted = max(1, min(self.options.consume_batch_size, offsets.end - position))
            messages = consumer.consume(wanted, timeout=0.1)
            records = []
            for message in messages:
                error = message.error()
                if error is None:
                    if message.offset() < offsets.end:
                        records.append(message)
                    continue
                if error.code() == KafkaError._PARTITION_EOF:
                    position = max(position, message.offset())
                elif error.code() in out_of_range:
                    position = self._lost(consumer, offsets, position, error.str(), outage)
                    checked_gap = True
                elif is_outage(error):
                    outage.noticed(what, safe_error(Exception(error.str()), config))
                else:
                    msg = (
                        f"firesteel.kafka: reading {offsets.name} offsets "
                        f"[{position}, {offsets.end}): {safe_error(Exception(error.str()), config)}"
                    )
                    raise KafkaSourceError(msg)
            if records:
                first = records[0].offset()
                if not checked_gap:
                    if first > offsets.start:
                        self._check_gap(consumer, offsets, first, outage)
                    _record_age(records[0])
                checked_gap = True
                position = max(position, records[-1].offset() + 1)
                batch = self._to_arrow(records, offsets, errors)
                if batch.num_rows:
                    yield batch
            if position < offsets.end:
                # Control records and aborted data advance the position without records.
                position = max(position, consumer.position([tp])[0].offset)
            if records or position > before:
                down.reason = None
                outage.recovered()
            elif down.reason is not None:
                outage.noticed(what, safe_error(Exception(down.reason), config))
            if messages or outage.ongoing:
                # While the brokers are away, retry.timeout.ms bounds the wait instead.
                waited_since = time.monotonic()
            elif time.monotonic() - waited_since > self.options.poll_timeout_ms / 1000:
                msg = (
                    f"firesteel.kafka: {offsets.name}: offsets [{position}, {offsets.end}) were "
                    f"promised to this batch but did not arrive within poll.timeout.ms="
                    f"{self.options.poll_timeout_ms}; is the broker reachable and the topic intact?"
                )
                raise KafkaSourceError(msg)

    def _check_gap(self, consumer: Any, offsets: OffsetRange, first: int, outage: Outage) -> None:
        """The first record lies beyond ``start``: retention, or just compaction/markers?"""
        low = self._log_start(consumer, offsets, outage)
        if low > offsets.start:
            why = f"log now starts at offset {low}"
            self._lost(consumer, offsets, offsets.start, why, outage)

    @staticmethod
    def _log_start(consumer: Any, offsets: OffsetRange, outage: Outage) -> int:
        from confluent_kafka import TopicPartition

        tp = TopicPartition(offsets.topic, offsets.partition)
        low, _high = outage.run(
            lambda timeout: consumer.get_watermark_offsets(tp, timeout=timeout),
            f"offsets of {offsets.name}",
        )
        return int(low)

    def _lost(
        self, consumer: Any, offsets: OffsetRange, position: int, why: str, outage: Outage
    ) -> int:
        """Offsets from ``position`` were deleted: fail, or skip to the log start (logged)."""
        from confluent_kafka import TopicPartition

        low = self._log_start(consumer, offsets, outage)
        lost_to = min(max(low, position), offsets.end)
        if self.options.fail_on_data_loss:
            msg = (
                f"firesteel.kafka: {offsets.name}: offsets [{position}, {lost_to}) of this batch "
                f"were deleted from the log ({why}), probably by retention. The records are "
                "lost; set option failOnDataLoss=false to skip them and continue"
            )
            raise DataLossError(msg)
        logger.warning(
            "firesteel.kafka: %s: skipping offsets [%d, %d) deleted from the log (%s); "
            "failOnDataLoss=false",
            offsets.name,
            position,
            lost_to,
            why,
        )
        if lost_to < offsets.end:
            # Not seek(): after an offset-out-of-range error librdkafka's fetcher is in an
            # error state where seek() fails with _STATE; a fresh assignment restarts it.
            consumer.assign([TopicPartition(offsets.topic, offsets.partition, lost_to)])
        return lost_to

    def _to_arrow(
        self, records: list[Any], offsets: OffsetRange, errors: ErrorHandler
    ) -> pa.RecordBatch:
        values = [m.value() for m in records]
        if self.decoder is not None:
            decoded = self.decoder.decode(values)
            if decoded.bad:
                for index, reason in decoded.bad:
                    errors.handle(
                        BadRecord(
                            offsets.name,
                            records[index].offset(),
                            reason,
                            values[index],
                            unit="offset",
                        )
                    )
                bad = {index for index, _ in decoded.bad}
                records = [m for i, m in enumerate(records) if i not in bad]
            value_columns = decoded.table.columns
        else:
            value_columns = [pa.array(values, pa.binary())]
        stamps = [m.timestamp() for m in records]
        columns = [
            pa.array([m.key() for m in records], pa.binary()),
            *value_columns,
            pa.array([offsets.topic] * len(records), pa.string()),
            pa.array([offsets.partition] * len(records), pa.int32()),
            pa.array([m.offset() for m in records], pa.int64()),
            pa.array([s[1] for s in stamps], pa.int64())
            .cast(pa.timestamp("ms", tz="UTC"))
            .cast(TIMESTAMP_TYPE),
            pa.array([s[0] for s in stamps], pa.int32()),
        ]
        if self.options.include_headers:
            columns.append(pa.array([m.headers() for m in records], HEADERS_TYPE))
        return pa.RecordBatch.from_arrays(
            [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns],
            schema=self.schema,
        )


OLDEST_RECORD_AGE = "oldest_record_age_seconds"
"""How old the first record of a range was when its task fetched it (a batch keeps the
largest: Flink's ``currentFetchEventTimeLag``, the oldest unread record's age)."""


def _record_age(message: Any) -> None:
    """Keep the age of a range's first record, by its timestamp (none: nothing kept)."""
    from confluent_kafka import TIMESTAMP_NOT_AVAILABLE

    kind, stamp_ms = message.timestamp()
    if kind != TIMESTAMP_NOT_AVAILABLE:
        task_metrics().maximum(OLDEST_RECORD_AGE, max(time.time() - stamp_ms / 1000, 0.0))
