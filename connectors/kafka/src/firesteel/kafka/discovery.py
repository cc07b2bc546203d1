"""Driver-side discovery: which topic-partitions exist and where their logs begin and end.

End offsets come from ListOffsets, one request per leader for all its
partitions (``offsets_for_times`` at ``OFFSET_END``): the high watermark, or
for a ``read_committed`` client (the default) the last stable offset, so a
batch never ends inside a transaction still open.

Every request waits out a broker outage for option ``retry.timeout.ms``
(:mod:`firesteel.kafka.outage`), so a restarting broker delays a batch's planning
instead of failing the query.
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from firesteel.core.spi import ConfigError
from firesteel.core.toolkit import has_committed, timed
from firesteel.kafka.config import client_config, safe_error
from firesteel.kafka.errors import KafkaSourceError
from firesteel.kafka.first_contact import first_contact
from firesteel.kafka.options import KafkaSourceOptions
from firesteel.kafka.outage import CALL_TIMEOUT, Outage

logger = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]

LEADER_MOVING = (-190, 3)
"""``_UNKNOWN_PARTITION`` and ``UNKNOWN_TOPIC_OR_PART``: asked about a partition that the
metadata just listed, they mean its leader is moving (a broker shutting down or starting:
the client dropped the partition from its metadata until a leader is known), and are
waited out like an outage."""


def consumer_config(options: KafkaSourceOptions, **overrides: Any) -> dict[str, Any]:
    """A consumer configuration: firesteel defaults, then ``kafka.*``, then ``overrides``.

    ``read_committed`` is the default isolation level; ``kafka.isolation.level``
    may change it. Offsets live in Spark's checkpoint, so auto-commit is off.
    """
    config: dict[str, Any] = {"isolation.level": "read_committed"}
    config.update(client_config(options.passthrough))
    config.setdefault("group.id", f"firesteel-{uuid.uuid4().hex[:12]}")
    config.update(client_config({}, enable_auto_commit=False, **overrides))
    return config


class Discovery:
    """Answers the source's driver-side questions with one long-lived consumer.

    Created only once the cluster answered (:func:`~firesteel.kafka.first_contact.first_contact`:
    at once for a new query, within ``retry.timeout.ms`` for one that committed a batch).
    Not thread-safe; one per source. :meth:`close` releases the consumer.
    """

    def __init__(self, options: KafkaSourceOptions) -> None:
        from confluent_kafka import Consumer, KafkaException

        self.options = options
        self.config = consumer_config(options, auto_offset_reset="latest")
        try:
            self.consumer = Consumer(self.config)
        except KafkaException as exc:
            what = "invalid client configuration (check the kafka.* options)"
            raise self._fail(what, exc) from exc
        resumed = has_committed(options.checkpoint_location)
        patience = options.retry_timeout_ms if resumed else None
        first_contact(self.consumer, self.config, "firesteel.kafka", patience=patience)
        self.outage = Outage("firesteel.kafka", self.config, options.retry_timeout_ms)
        self.pattern = re.compile(options.subscribe_pattern) if options.subscribe_pattern else None

    def close(self) -> None:
        """Close the consumer (idempotent)."""
        self.consumer.close()

    def _fail(self, what: str, exc: BaseException) -> KafkaSourceError:
        return KafkaSourceError(f"firesteel.kafka: {what}: {safe_error(exc, self.config)}")

    def topic_partitions(self) -> list[TopicPartitionKey]:
        """Every partition of every subscribed topic that exists now, sorted."""
        from confluent_kafka import KafkaException

        try:
            with timed("kafka.metadata"):
                metadata = self.outage.run(
                    lambda timeout: self.consumer.list_topics(timeout=timeout), "cluster metadata"
                )
        except KafkaException as exc:
            what = "cannot read cluster metadata"
            raise self._fail(what, exc) from exc
        found: list[TopicPartitionKey] = []
        wanted = set(self.options.topics)
        for name, topic in metadata.topics.items():
            if topic.error is not None and name in wanted:
                logger.warning("firesteel.kafka: topic %s: %s", name, topic.error)
                continue
            matches = (
                name in wanted
                if self.pattern is None
                else (not name.startswith("__") and self.pattern.fullmatch(name) is not None)
            )
            if matches:
                found.extend((name, p) for p in topic.partitions)
        return sorted(found)

    def _watermarks(self, tps: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, tuple]:
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        def ask(tp: Any) -> Callable[[float], tuple]:
            def call(timeout: float) -> tuple:
                try:
                    return self.consumer.get_watermark_offsets(tp, timeout=timeout)
                except KafkaException as exc:
                    if exc.args[0].code() == KafkaError._UNKNOWN_PARTITION:
                        # The client dropped the partition from its metadata while its
                        # leader was away and, for a topic it is not assigned, does not
                        # ask again by itself (seen failing for 120 s after the broker was
                        # back): a metadata request for the topic brings it back.
                        with contextlib.suppress(KafkaException):
                            self.consumer.list_topics(tp.topic, timeout=timeout)
                    raise

            return call

        marks = {}
        for topic, partition in tps:
            try:
                marks[(topic, partition)] = self.outage.run(
                    ask(TopicPartition(topic, partition)),
                    f"offsets of {topic}[{partition}]",
                    LEADER_MOVING,
                )
            except KafkaException as exc:
                what = f"cannot list offsets of {topic}[{partition}]"
                raise self._fail(what, exc) from exc
        return marks

    def earliest(self, tps: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """The first offset still in each partition's log (after retention)."""
        return {tp: low for tp, (low, _high) in self._watermarks(tps).items()}

    def latest(self, tps: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """The end of each partition: the next offset a ``read_committed`` reader can reach.

        One ``offsets_for_times`` at ``OFFSET_END`` (the protocol's latest, with the
        consumer's isolation level, as the watermark query) asks once per leader, where
        ``get_watermark_offsets`` asks partition by partition. A partition's own error
        (its leader moving) or a failed request falls back to that per-partition path,
        which waits an outage out, or names it. The one request is tried once: after a
        broker restart it kept failing with ``_UNKNOWN_PARTITION`` for as long as the
        outage window lasted, where the per-partition path answered.
        """
        from confluent_kafka import OFFSET_END, KafkaException, TopicPartition

        tps = list(tps)
        if not tps:
            return {}
        wanted = [TopicPartition(t, p, OFFSET_END) for t, p in tps]
        found = None
        with timed("kafka.end_offsets"), contextlib.suppress(KafkaException):
            found = self.consumer.offsets_for_times(wanted, timeout=CALL_TIMEOUT)
        if found is None or any(tp.error is not None for tp in found):
            return {tp: high for tp, (_low, high) in self._watermarks(tps).items()}
        return {(tp.topic, tp.partition): tp.offset for tp in found}

    def offsets_for_times(
        self, tps: Iterable[TopicPartitionKey], timestamp_ms: int
    ) -> dict[TopicPartitionKey, int]:
        """The first offset with a timestamp >= ``timestamp_ms``; -1 where no record is."""
        from confluent_kafka import TopicPartition

        wanted = [TopicPartition(t, p, timestamp_ms) for t, p in tps]
        found = self._offsets_for_times(
            wanted, "offsets by timestamp", "cannot look up offsets by timestamp"
        )
        return {(tp.topic, tp.partition): tp.offset for tp in found}

    def _offsets_for_times(self, wanted: list[Any], doing: str, failed: str) -> list[Any]:
        """``offsets_for_times`` of ``wanted`` riding out an outage (``doing`` in its log
        lines); ``failed`` leads the error once the outage window is over."""
        from confluent_kafka import KafkaException

        try:
            found: list[Any] = self.outage.run(
                lambda timeout: self.consumer.offsets_for_times(wanted, timeout=timeout),
                doing,
                LEADER_MOVING,
            )
        except KafkaException as exc:
            raise self._fail(failed, exc) from exc
        return found

    def commit_progress(self, group: str, offsets: Mapping[TopicPartitionKey, int]) -> None:
        """Report ``offsets`` as the committed position of consumer group ``group``."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        if not offsets:
            return
        reporter = Consumer({**self.config, "group.id": group, "enable.partition.eof": False})
        try:
            reporter.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                asynchronous=False,
            )
        except KafkaException as exc:
            # Progress reports are for monitoring only; the checkpoint is the truth.
            logger.warning(
                "firesteel.kafka: reporting progress to group %s failed: %s",
                group,
                safe_error(exc, self.config),
            )
        finally:
            reporter.close()


def parse_partition_offsets(text: str, option: str) -> dict[TopicPartitionKey, int]:
    """Parse ``{"topic": {"0": 23, "1": -2}}`` (Spark's format; -2 earliest, -1 latest)."""
    import json

    try:
        raw = json.loads(text)
        return {
            (str(topic), int(partition)): int(offset)
            for topic, partitions in raw.items()
            for partition, offset in partitions.items()
        }
    except (ValueError, AttributeError, TypeError) as exc:
        msg = (
            f"firesteel.kafka: option '{option}' must be earliest, latest or JSON like "
            f'{{"topic": {{"0": 23, "1": -2}}}}, got {text!r}'
        )
        raise ConfigError(msg) from exc
