"""What a job has committed to a Kafka topic, seen by a plain ``read_committed`` consumer.

The consumer runs in a thread from before the job starts; it notes the time each
record became readable, so a side's wall time ends when its last output record was
committed, and its latency is that time minus the produce time the record carries.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

POLL_S = 0.05


@dataclass
class Output:
    """What the watcher saw: records, the keyed counts' latest values, and when."""

    records: int = 0
    counts: dict[bytes, int] = field(default_factory=dict)
    """Per key, the highest count read (outputs of a keyed running count)."""
    first: float | None = None
    """perf_counter() when the first record was read."""
    last: float | None = None
    """perf_counter() when the latest record was read."""
    latencies_ms: list[float] = field(default_factory=list)
    """Per record, read time minus the produce time in its value (latency runs only)."""

    @property
    def counted(self) -> int:
        """Events a keyed count has accounted for: the sum of its keys' latest counts."""
        return sum(self.counts.values())


def produce_stamp(value: bytes) -> int:
    """The wall-clock nanoseconds a latency record was produced at (its first 20 digits)."""
    return int(value[:20])


class Watcher:
    """Reads ``topic`` from the beginning until stopped; ``wait`` blocks on a condition."""

    def __init__(
        self, bootstrap: str, topic: str, partitions: int, *, counts: bool, stamps: bool
    ) -> None:
        self.output = Output()
        self._counts = counts
        self._stamps = stamps
        self._stop = threading.Event()
        self._changed = threading.Condition()
        self._error: BaseException | None = None
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"peers-watch-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                messages = self._consumer.consume(num_messages=10_000, timeout=POLL_S)
                if messages:
                    self._take(messages)
        except BaseException as exc:  # handed to the waiting thread
            self._error = exc
        finally:
            self._consumer.close()
            with self._changed:
                self._changed.notify_all()

    def _take(self, messages: list) -> None:  # type: ignore[type-arg]
        now = time.perf_counter()
        wall_ns = time.time_ns()
        out = self.output
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(error)
            value = message.value() or b""
            out.records += 1
            if self._counts:
                key = message.key() or b""
                out.counts[key] = max(out.counts.get(key, 0), int(value))
            if self._stamps:
                out.latencies_ms.append((wall_ns - produce_stamp(value)) / 1e6)
        out.first = out.first or now
        out.last = now
        with self._changed:
            self._changed.notify_all()

    def wait_records(
        self, expected: int, timeout: float, job_alive: Callable[[], None] | None = None
    ) -> float:
        """perf_counter() when ``expected`` records (or, for counts, events) were committed."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                seen = self.output.counted if self._counts else self.output.records
                if seen >= expected:
                    assert self.output.last is not None
                    return self.output.last
                if self._error is not None:
                    raise self._error
                left = deadline - time.monotonic()
                if left <= 0:
                    msg = f"watcher: {seen} of {expected} committed after {timeout:g} s"
                    raise TimeoutError(msg)
                if job_alive is not None:
                    job_alive()
                self._changed.wait(min(left, 1.0))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
