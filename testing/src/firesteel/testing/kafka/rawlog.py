"""Reading a topic's raw log and applying transaction markers, without trusting the broker.

A ``read_committed`` consumer relies on the broker to hide aborted data.
:func:`read_log` fetches raw record batches with kafka-python (a client that is
not the product's) and applies the control records itself: a transactional
record is visible once a COMMIT marker of its producer follows it, never after
an ABORT, and pending while neither has. It is the exactly-once checker's
second reader; kafka-python comes with the extra ``firesteel-testing[kafka]``
and is imported only when :func:`read_log` runs.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

COMMIT, ABORT = 1, 0
EMPTY_FETCH_RETRIES = 20
FETCH_BYTES = 1 << 20
"""Bytes asked for per raw fetch."""
RECEIVE_BYTES = 256 << 20
"""Largest response frame accepted (brokers may answer more than asked for)."""


@dataclass(frozen=True)
class LogRecord:
    """A data record as stored in the log."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    producer_id: int
    transactional: bool


@dataclass
class LogView:
    """A topic as a read_committed reader must see it, computed from the raw log."""

    committed: list[LogRecord] = field(default_factory=list)
    """Non-transactional records and records of committed transactions, by partition and offset."""
    aborted: list[LogRecord] = field(default_factory=list)
    """Records of aborted transactions (never visible)."""
    pending: list[LogRecord] = field(default_factory=list)
    """Records of transactions with no marker yet (not visible now)."""
    end_offsets: dict[int, int] = field(default_factory=dict)

    @property
    def values(self) -> list[bytes | None]:
        """Values of the committed records."""
        return [r.value for r in self.committed]


def _partition_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return {p: info.leader for p, info in metadata.topics[topic].partitions.items()}


def read_log(
    bootstrap: str,
    topic: str,
    partitions: Iterable[int] | None = None,
    start: Mapping[int, int] | None = None,
) -> LogView:
    """Read ``topic`` (all partitions, or ``partitions``) raw and apply commit/abort markers.

    ``start`` reads a partition from that offset on; records of transactions
    that began before it are then missing from the view.
    """
    from kafka.net.compat import KafkaNetClient
    from kafka.protocol.consumer import FetchRequest
    from kafka.record import MemoryRecords

    view = LogView()
    client = KafkaNetClient(bootstrap_servers=bootstrap, receive_message_max_bytes=RECEIVE_BYTES)
    try:
        client.check_version()
        leaders = _partition_leaders(bootstrap, topic)
        wanted = sorted(leaders) if partitions is None else sorted(partitions)
        for partition in wanted:
            leader = leaders[partition]
            open_txns: dict[int, list[LogRecord]] = {}
            offset = (start or {}).get(partition, 0)
            high = None
            empty_fetches = 0
            while high is None or offset < high:
                request = FetchRequest(
                    max_wait_ms=10,
                    min_bytes=1,
                    max_bytes=FETCH_BYTES,
                    isolation_level=0,
                    topics=[
                        FetchRequest.FetchTopic(
                            topic=topic,
                            partitions=[
                                FetchRequest.FetchTopic.FetchPartition(
                                    partition=partition,
                                    fetch_offset=offset,
                                    partition_max_bytes=FETCH_BYTES,
                                )
                            ],
                        )
                    ],
                    max_version=10,
                )
                response = client.send_and_receive(leader, request)
                data = response.responses[0].partitions[0]
                if data.error_code:
                    msg = f"fetch {topic}[{partition}]@{offset}: error {data.error_code}"
                    raise RuntimeError(msg)
                high = data.high_watermark
                records = MemoryRecords(data.records or b"")
                advanced = False
                while (batch := records.next_batch()) is not None:
                    advanced = True
                    _apply(batch, partition, open_txns, view)
                    offset = batch.next_offset
                if advanced:
                    empty_fetches = 0
                elif offset < high:
                    # A broker may answer a fetch racing a write with no batch yet.
                    empty_fetches += 1
                    if empty_fetches > EMPTY_FETCH_RETRIES:
                        msg = f"fetch {topic}[{partition}]@{offset} returned nothing below {high}"
                        raise RuntimeError(msg)
                    time.sleep(0.1)
            view.end_offsets[partition] = offset
            for pending in open_txns.values():
                view.pending.extend(pending)
    finally:
        client.close()
    view.committed.sort(key=lambda r: (r.partition, r.offset))
    return view


def _apply(
    batch: Any, partition: int, open_txns: dict[int, list[LogRecord]], view: LogView
) -> None:
    pid = batch.producer_id
    if batch.is_control_batch:
        for marker in batch:
            records = open_txns.pop(pid, [])
            (view.committed if marker.type == COMMIT else view.aborted).extend(records)
        return
    for record in batch:
        entry = LogRecord(
            partition,
            record.offset,
            record.key,
            record.value,
            tuple((k, v) for k, v in record.headers),
            pid,
            batch.is_transactional,
        )
        if batch.is_transactional:
            open_txns.setdefault(pid, []).append(entry)
        else:
            view.committed.append(entry)
