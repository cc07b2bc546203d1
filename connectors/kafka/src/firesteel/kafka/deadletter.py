"""A dead-letter topic for records the source cannot decode (``errors=quarantine``)."""

from __future__ import annotations

from typing import Any

from firesteel.core.spi import SinkError
from firesteel.core.toolkit import BadRecord, DeadLetter, DeadLetterWriter
from firesteel.kafka.config import client_config, safe_error


class _TopicWriter(DeadLetterWriter):
    def __init__(self, topic: str, config: dict[str, Any]) -> None:
        self.topic = topic
        self.config = config
        self.records: list[BadRecord] = []

    def add(self, record: BadRecord) -> None:
        self.records.append(record)

    def close(self) -> None:
        from confluent_kafka import Producer

        if not self.records:
            return
        failures: list[str] = []

        def report(err: Any, _msg: Any) -> None:
            if err is not None:
                failures.append(err.str())

        producer = Producer(self.config)
        for record in self.records:
            producer.produce(
                self.topic,
                value=record.raw,
                key=f"{record.location}@{record.position}".encode(),
                headers=[
                    ("firesteel.location", record.location.encode()),
                    ("firesteel.offset", str(record.position).encode()),
                    ("firesteel.reason", record.reason.encode()),
                ],
                on_delivery=report,
            )
        remaining = producer.flush(60)
        if failures or remaining:
            msg = (
                f"firesteel.kafka: could not quarantine {len(failures) + remaining} records to "
                f"dead-letter topic {self.topic}: "
                f"{safe_error(Exception(failures[0] if failures else 'timeout'), self.config)}"
            )
            raise SinkError(msg)


class TopicDeadLetter(DeadLetter):
    """Produces each bad record, raw, to ``topic`` before its batch can commit.

    The record key is ``topic[partition]@offset`` of the bad input and headers
    say where it came from and why it failed. A topic cannot replace what an
    earlier attempt wrote, so after a crash a record may be quarantined twice
    (at-least-once); its key makes the copies recognisable.
    """

    def __init__(self, topic: str, passthrough: dict[str, str]) -> None:
        self.topic = topic
        self.config = client_config(passthrough, acks="all", enable_idempotence=True)

    def open(self, key: str) -> DeadLetterWriter:
        return _TopicWriter(self.topic, self.config)
