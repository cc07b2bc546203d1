"""The optional marker log: one record per task transaction, for brokers that lose markers.

With option ``marker.log.topic`` each exactly-once transaction also writes a
record (key ``<sink id>/<p>``, value N) to partition 0 of that topic, in the
same transaction as the data. A task whose group marker (:mod:`.marker`) says
"not committed" reads the tail of the log and skips if a committed record for
its batch is there: tansu 0.6 can commit a transaction's data yet drop its
consumer-group offsets when the client dies inside ``commit_transaction``.

Two readers (option ``marker.log.reader``):

* ``read_committed`` (default): a confluent-kafka consumer, relying on the
  broker's own isolation (Apache Kafka honours it). It reads to the high
  watermark seen when it started, so it waits while another task's
  transaction that began before that point is still open (at most
  ``retry.timeout.ms``), and stops as soon as it finds the record it looks for;
* ``raw``: fetches the raw record batches and applies commit/abort markers
  itself, for brokers whose ``read_committed`` shows aborted data (tansu 0.6).
  It is :mod:`firesteel.kafka.rawlog`, on kafka-python, which the extra
  ``firesteel-kafka[tansu]`` installs; it is imported only on this path and
  connects in plaintext (no SASL/SSL).
"""

from __future__ import annotations

import importlib.util
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from firesteel.core.spi import ConfigError, SinkError
from firesteel.kafka.config import consumer_config
from firesteel.kafka.options import MarkerLogReader

logger = logging.getLogger(__name__)

MARKER_LOG_TAIL = 2_000
"""Offsets of the marker log read back: two per task transaction, so ~1000 tasks."""
RAW_EXTRA = "firesteel-kafka[tansu]"
"""The extra that installs the raw reader's client (kafka-python)."""
_GROUP = "firesteel-marker-log"
"""librdkafka wants a group id; the readers never join it or commit to it."""


@dataclass(frozen=True)
class MarkerLog:
    """Partition 0 of ``topic``, written in each transaction and read back on doubt."""

    topic: str
    reader: MarkerLogReader
    config: dict[str, Any]
    """The sink's client configuration."""
    timeout_ms: int
    """How long a read may wait for open transactions (option ``retry.timeout.ms``)."""

    def check_reader(self) -> None:
        """Raise :class:`ConfigError` naming the extra if the raw reader's client is missing.

        Called on the driver and again in each task that reads: executors may
        have other packages than the driver.
        """
        if self.reader == "raw" and importlib.util.find_spec("kafka") is None:
            msg = (
                "firesteel.kafka sink: option 'marker.log.reader' is raw, which reads the "
                "marker log with kafka-python; install it with "
                f"pip install '{RAW_EXTRA}' wherever the query runs"
            )
            raise ConfigError(msg)

    def append(self, producer: Any, key: bytes, batch_id: int) -> None:
        """Add batch ``batch_id``'s record to ``producer``'s open transaction."""
        producer.produce(self.topic, str(batch_id).encode(), key, 0)

    def covers(self, key: bytes, batch_id: int) -> bool:
        """Whether the log's tail holds a committed record of ``key`` for ``batch_id`` or later.

        An earlier attempt of this batch wrote its record after every older
        batch's, so the tail (:data:`MARKER_LOG_TAIL` offsets) is enough.
        """
        self.check_reader()
        low, high = self._watermarks()
        if high <= low:
            return False
        start = max(low, high - MARKER_LOG_TAIL)

        def wanted(record_key: bytes | None, value: bytes | None) -> bool:
            return record_key == key and int(value or b"-1") >= batch_id

        if self.reader == "raw":
            return any(wanted(k, v) for k, v in self._read_raw(start))
        return self._find_committed(start, high, wanted)

    def _watermarks(self) -> tuple[int, int]:
        """The log's start and high watermark (not its last stable offset)."""
        from confluent_kafka import Consumer, TopicPartition

        probe = Consumer(
            {
                **consumer_config(self.config),
                "group.id": _GROUP,
                "isolation.level": "read_uncommitted",
            }
        )
        try:
            low, high = probe.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=30)
        finally:
            probe.close()
        return int(low), int(high)

    def _find_committed(
        self, start: int, end: int, wanted: Callable[[bytes | None, bytes | None], bool]
    ) -> bool:
        """Whether a committed record of ``[start, end)`` is ``wanted``, read through the
        broker's own isolation; stops at the first one.

        Control records and aborted data count in the consumer's position, so
        a range ending on them does not stall.
        """
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        consumer = Consumer(
            {
                **consumer_config(self.config),
                "group.id": _GROUP,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        partition = TopicPartition(self.topic, 0)
        deadline = time.monotonic() + self.timeout_ms / 1000
        try:
            consumer.assign([TopicPartition(self.topic, 0, start)])
            position = start
            while position < end:
                if time.monotonic() > deadline:
                    msg = (
                        f"firesteel.kafka sink: marker log {self.topic!r} could not be read "
                        f"to offset {end} within retry.timeout.ms={self.timeout_ms} (stopped "
                        f"at {position}: a transaction still open?); the task is retried"
                    )
                    raise SinkError(msg)
                for message in consumer.consume(1000, timeout=0.2):
                    error = message.error()
                    if error is None:
                        if wanted(message.key(), message.value()):
                            return True
                        position = max(position, int(message.offset() or 0) + 1)
                    elif error.code() != KafkaError._PARTITION_EOF and not error.retriable():
                        msg = f"firesteel.kafka sink: marker log {self.topic!r}: {error.str()}"
                        raise SinkError(msg)
                position = max(position, consumer.position([partition])[0].offset)
            return False
        finally:
            consumer.close()

    def _read_raw(self, start: int) -> list[tuple[bytes | None, bytes | None]]:
        """Committed records from ``start`` on, applying transaction markers here."""
        from firesteel.kafka.rawlog import read_log

        bootstrap = str(self.config.get("bootstrap.servers", ""))
        view = read_log(bootstrap, self.topic, [0], {0: start})
        return [(r.key, r.value) for r in view.committed]
