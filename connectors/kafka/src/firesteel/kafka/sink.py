"""The Kafka sinks: at-least-once (a plain sink) and exactly-once (transactions).

Exactly-once, per write task of batch N and Spark partition p (sink S):

1. take the producer with ``transactional.id = <prefix>-<S>-<p>`` (stable
   across restarts and retries) that an earlier task left in this Python
   worker (:mod:`firesteel.kafka.pool`), or create one and call
   ``init_transactions``: this fences every older instance with the same id
   (a zombie of a crashed attempt) and aborts its open transaction;
2. read the marker: the committed offset of consumer group ``<prefix>-<S>-marker-<p>``
   on partition 0 of the marker topic encodes the last batch this partition
   committed, plus one. If it says N or later, the task writes nothing. Its
   offset metadata names the query that committed it: a marker of another
   query (a deleted and recreated checkpoint of the same job, whose default
   sink id follows the output topics, or two queries sharing an explicit
   ``sink.id``) fails the task with a ``ConfigError`` naming option
   ``sink.new.stream`` instead of skipping or repeating that query's batches;
3. ``begin_transaction``, then at once ``send_offsets_to_transaction``: the
   marker becomes N + 1 *inside* the transaction;
4. produce the rows, flush, ``commit_transaction``: data and marker become
   visible together or not at all;
5. give the producer back to the worker's pool and vote. The driver's commit
   has nothing left to do.

A kept producer skipped ``init_transactions``, so step 3 doubles as the check
that it is still the newest instance of its id: if another one called
``init_transactions`` since (the same Spark partition ran in another worker,
or a zombie), the broker refuses ``send_offsets_to_transaction`` as fenced
before a single record was produced, and the task starts over at step 1 with
a new producer. Its marker read (step 2) was still right: a producer whose
epoch is current has had the only say over its id since its own
``init_transactions``, and it held no open transaction. A kept producer reads
the marker with a short timeout (:data:`KEPT_MARKER_TIMEOUT`): a marker still
pending in another instance's open transaction cannot be read, and the new
producer's ``init_transactions`` aborts that transaction. Each marker also
names the producer instance that committed it (``by``): a kept producer whose
marker names another instance was certainly fenced by it, and is not tried
(nor is librdkafka's fencing error logged for it).

librdkafka cannot commit another process's transaction, so the commit happens
in the task (step 4) rather than on the driver: a batch can be visible in
Kafka before Spark writes ``commits/N``; a re-run then finds the markers and
skips. Transactions live only for the length of a task; a task that nears
``transaction.timeout.ms`` aborts rather than let the broker abort it later.
"""

from __future__ import annotations

import enum
import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa

from firesteel.core.context import TaskScope
from firesteel.core.errors import ConfigError, SinkError
from firesteel.core.faults import fault_point
from firesteel.core.sink import Committable, PlainSink, TwoPhaseCommitSink
from firesteel.kafka.codec import ValueEncoder, schema_text
from firesteel.kafka.config import (
    client_config,
    consumer_config,
    redact,
    safe_error,
    scrub,
    secrets_of,
)
from firesteel.kafka.options import KafkaSinkOptions
from firesteel.kafka.pool import (
    SharedProducers,
    TransactionalClient,
    TransactionalPool,
    config_key,
)
from firesteel.kafka.producing import (
    DeliveryTracker,
    flush,
    is_fencing,
    produce_all,
    tracked_config,
)
from firesteel.kafka.reach import first_contact
from firesteel.kafka.rows import RowExtractor, load_partitioner

logger = logging.getLogger(__name__)

AFTER_PRODUCE = fault_point(
    "kafka.after_produce", "a task handed its records to the producer, before the flush"
)
AFTER_FLUSH = fault_point("kafka.after_flush", "the broker acknowledged a task's records")
BEFORE_COMMIT_TRANSACTION = fault_point(
    "kafka.before_commit_transaction", "a task's transaction is flushed, before its commit"
)
AFTER_COMMIT_TRANSACTION = fault_point(
    "kafka.after_commit_transaction", "a task's transaction committed, before its vote"
)

TIMEOUT_MARGIN = 0.8
"""A task aborts its transaction once it has been open this fraction of the timeout."""
NO_MARKER = -1
ABORT_TIMEOUT = 30
CALL_TIMEOUT = 60.0
"""Longest single attempt of a transactional call (retries continue until retry.timeout.ms)."""
MARKER_LOG_TAIL = 2_000
"""Offsets of the marker log read back: two per task transaction, so ~1000 tasks."""


def _extractor(options: KafkaSinkOptions, producer: Any) -> RowExtractor:
    encoder = None
    if options.value_format != "binary":
        encoder = ValueEncoder(
            options.value_format,
            schema_text(options.value_schema, options.value_schema_file, "value.schema")
            if options.value_format == "avro"
            else None,
        )
    partitioner = load_partitioner(options.partitioner) if options.partitioner else None
    counts: dict[str, int] = {}

    def partition_count(topic: str) -> int:
        if topic not in counts:
            counts[topic] = len(producer.list_topics(topic, timeout=30).topics[topic].partitions)
        return counts[topic]

    return RowExtractor(options.topic, encoder, partitioner, partition_count)


MARKER_READ_TIMEOUT = 60.0
"""How long reading a commit marker may retry while the group coordinator is not ready."""
KEPT_MARKER_TIMEOUT = 5.0
"""How long a kept producer's task waits for its marker before it starts over with a new one."""
FIRST_RECONNECT_MS = 10
"""``reconnect.backoff.ms`` of the transactional producers and marker consumers unless the
user sets it: librdkafka's 100 ms default delays the connection to the broker a new client
learns from the bootstrap reply, which cost a new producer 60 ms before ``init_transactions``
returned and a marker read 58 ms (20 and 18 ms with 10). Repeated failures still back off
exponentially up to ``reconnect.backoff.max.ms``."""
_COORDINATOR_NOT_READY = frozenset(
    {"NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE"}
)


def _committed_marker(consumer: Any, partition: Any, timeout: float) -> Any:
    """The marker group's committed offset, retried while its coordinator is not ready.

    librdkafka returns ``NOT_COORDINATOR`` from ``committed()`` instead of
    retrying it while a fresh broker is still creating ``__consumer_offsets``
    or a coordinator moves; those are waited out, anything else is raised.
    An error the broker gives for the partition alone comes back on the
    returned partition, whose offset then says nothing: it is raised (or
    waited out) the same way, never read as "no marker", which would write a
    committed batch again.
    """
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            (marker,) = consumer.committed([partition], timeout=max(left, 0.5))
            if marker.error is not None:
                raise KafkaException(marker.error)
            return marker
        except KafkaException as exc:
            error = exc.args[0]
            not_ready = error.retriable() or error.name() in _COORDINATOR_NOT_READY
            if not not_ready or left <= 0:
                raise
            logger.info("firesteel.kafka sink: marker group not ready (%s); retrying", error)
            time.sleep(0.2)


MARKER_METADATA_VERSION = 1
"""Version of the JSON a commit marker carries in its offset metadata."""


def marker_metadata(query_id: str, producer_token: str) -> str:
    """The offset metadata of a commit marker: the query and the producer instance that
    committed it (``by``: :attr:`~firesteel.kafka.pool.TransactionalClient.token`)."""
    fields = {"v": MARKER_METADATA_VERSION, "query": query_id, "by": producer_token}
    return json.dumps(fields, separators=(",", ":"))


def _marker_field(metadata: str | None, name: str) -> str | None:
    if not metadata:
        return None
    try:
        parsed = json.loads(metadata)
    except ValueError:
        return None
    value = parsed.get(name) if isinstance(parsed, dict) else None
    return value if isinstance(value, str) else None


def marker_owner(metadata: str | None) -> str | None:
    """The query id a marker's metadata names; ``None`` for markers without one."""
    return _marker_field(metadata, "query")


def marker_writer(metadata: str | None) -> str | None:
    """The token of the producer instance that committed a marker, if it says."""
    return _marker_field(metadata, "by")


_PRODUCERS = SharedProducers()
_TRANSACTIONAL = TransactionalPool()

_PREPARED: set[tuple[str, str, int]] = set()
"""(bootstrap servers, marker topic, timeout) whose checks passed in this process."""
_REACHED: set[str] = set()
"""Bootstrap servers that answered in this process."""


def _reach(config: dict[str, Any]) -> None:
    """Fail the query before its first task unless the cluster answers (once per process:
    Spark rebuilds a sink's driver half for every batch)."""
    from confluent_kafka.admin import AdminClient

    servers = str(config.get("bootstrap.servers"))
    if servers not in _REACHED:
        first_contact(AdminClient(config), config, "firesteel.kafka sink")
        _REACHED.add(servers)


class KafkaSink(PlainSink):
    """``guarantee`` none / at-least-once: produce and (at-least-once) confirm every record.

    With at-least-once the task returns only after every record's delivery
    report came back without error (``acks=all`` and idempotence by default),
    so a resettable source makes the query at-least-once. ``none`` flushes but
    only logs failed deliveries.
    """

    name: ClassVar[str] = "firesteel.kafka"

    def __init__(self, options: KafkaSinkOptions, sink_id: str) -> None:
        self.options = options
        self.sink_id = sink_id
        self.checked = options.guarantee is None or options.guarantee.value > 0
        self.config = client_config(options.passthrough)
        if self.checked:
            self.config = {"acks": "all", "enable.idempotence": True, **self.config}

    def prepare(self) -> None:
        _reach(self.config)
        logger.info("firesteel.kafka sink %s: producer %s", self.sink_id, redact(self.config))

    def write(self, scope: TaskScope, batches: Iterator[pa.RecordBatch]) -> int:
        producer, tracker = _PRODUCERS.get(self.config)
        extractor = _extractor(self.options, producer)
        rows = 0
        for batch in batches:
            args = extractor.extract(batch)
            produce_all(producer, args)
            rows += len(args)
        AFTER_PRODUCE.fire(scope.batch_id, scope.partition_id)
        what = f"batch {scope.batch_id} partition {scope.partition_id}"
        if self.checked:
            flush(producer, tracker, self.options.flush_timeout_ms, what)
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


class TxnState(enum.Enum):
    """Where one task's transaction is: NEW -> OPEN | SKIPPED; OPEN -> COMMITTED | ABORTED."""

    NEW = "new"
    """Nothing produced yet; opened lazily on the first non-empty batch."""
    OPEN = "open"
    SKIPPED = "skipped"
    """The marker says an earlier attempt committed this (batch, partition)."""
    COMMITTED = "committed"
    ABORTED = "aborted"


@dataclass(frozen=True)
class KafkaCommittable(Committable):
    """A task's vote: its transaction (already committed in the task) and its rows."""

    transactional_id: str
    rows: int
    skipped: bool
    """The marker said an earlier attempt had committed this (batch, partition)."""


@dataclass
class KafkaTransaction:
    """One task's transaction: opened lazily, on the first non-empty batch."""

    scope: TaskScope
    transactional_id: str
    client: TransactionalClient | None = None
    extractor: RowExtractor | None = None
    state: TxnState = TxnState.NEW
    opened_at: float = 0.0
    rows: int = 0
    committed_batch: int = NO_MARKER

    @property
    def producer(self) -> Any:
        """The transaction's producer (``None`` before it is opened)."""
        return self.client.producer if self.client is not None else None

    @property
    def tracker(self) -> DeliveryTracker | None:
        """The producer's delivery and error tracker."""
        return self.client.tracker if self.client is not None else None


def _retries_ran_out(exc: SinkError) -> bool:
    """Whether a transactional call failed only because its retriable errors outlasted the
    deadline (a new producer would wait as long again), not because it was refused."""
    from confluent_kafka import KafkaException

    cause = exc.__cause__
    return isinstance(cause, KafkaException) and bool(cause.args[0].retriable())


class KafkaExactlyOnceSink(TwoPhaseCommitSink[KafkaTransaction, KafkaCommittable]):
    """``guarantee=exactly-once``: one Kafka transaction per task (see the module docs)."""

    name: ClassVar[str] = "firesteel.kafka"
    committable_type = KafkaCommittable

    def __init__(self, options: KafkaSinkOptions, sink_id: str) -> None:
        self.options = options
        self.sink_id = sink_id
        self.timeout_ms = options.transaction_timeout_ms()
        self.marker_topic = options.marker_topic or options.topic or ""
        self.config = {
            "reconnect.backoff.ms": FIRST_RECONNECT_MS,
            **client_config(options.passthrough),
        }

    def transactional_id(self, partition: int) -> str:
        """Stable per (sink, Spark partition): the same id fences earlier attempts."""
        return f"{self.options.transactional_id_prefix}-{self.sink_id}-{partition}"

    def marker_group(self, partition: int) -> str:
        """The consumer group whose committed offset is partition ``partition``'s marker."""
        return f"{self.options.transactional_id_prefix}-{self.sink_id}-marker-{partition}"

    def prepare(self) -> None:
        """Check the marker topic exists and the timeout fits the broker's cap.

        Spark rebuilds the sink's driver half for every batch, often in a reused
        Python process: a check that passed there is not repeated.
        """
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient, ConfigResource

        checked = (str(self.config.get("bootstrap.servers")), self.marker_topic, self.timeout_ms)
        if checked in _PREPARED:
            super().prepare()
            return
        admin = AdminClient(self.config)
        metadata = first_contact(admin, self.config, "firesteel.kafka sink", self.marker_topic)
        topic = metadata.topics.get(self.marker_topic)
        if topic is None or topic.error is not None or not topic.partitions:
            msg = (
                f"firesteel.kafka sink: marker topic {self.marker_topic!r} (option 'marker.topic' "
                "or 'topic') does not exist; create it before starting the query"
            )
            raise ConfigError(msg)
        self._check_broker_timeout(admin, list(metadata.brokers), ConfigResource, KafkaException)
        logger.info(
            "firesteel.kafka sink %s: exactly-once, producer %s", self.sink_id, redact(self.config)
        )
        _PREPARED.add(checked)
        super().prepare()

    def _check_broker_timeout(
        self, admin: Any, brokers: list[int], resource_cls: Any, error_cls: Any
    ) -> None:
        if not brokers:
            return
        resource = resource_cls("broker", str(brokers[0]))
        try:
            configs = admin.describe_configs([resource])[resource].result(timeout=10)
        except (error_cls, TimeoutError, ValueError) as exc:
            logger.info("firesteel.kafka sink: broker config not readable (%s); skipping", exc)
            return
        entry = configs.get("transaction.max.timeout.ms")
        if entry is not None and entry.value and self.timeout_ms > int(entry.value):
            msg = (
                f"firesteel.kafka sink: kafka.transaction.timeout.ms={self.timeout_ms} exceeds "
                f"the broker's transaction.max.timeout.ms={entry.value}; lower it"
            )
            raise ConfigError(msg)

    def begin_transaction(self, scope: TaskScope) -> KafkaTransaction:
        return KafkaTransaction(scope, self.transactional_id(scope.partition_id))

    def _producer_config(self, transactional_id: str) -> dict[str, Any]:
        config = {**self.config, "transactional.id": transactional_id}
        config.setdefault("transaction.timeout.ms", self.timeout_ms)
        return config

    def _pool_key(self, txn: KafkaTransaction) -> tuple[Any, ...]:
        return config_key(self._producer_config(txn.transactional_id))

    def _open(self, txn: KafkaTransaction) -> None:
        """Steps 1-3 of the module docs: a kept producer if it still may, else a new one."""
        kept = _TRANSACTIONAL.take(self._pool_key(txn))
        consumer = None
        if kept is not None:
            txn.client = kept
            if self._start(txn, kept=True):
                logger.debug("firesteel.kafka sink: %s: kept producer", txn.transactional_id)
                return
            consumer = kept.marker_consumer
            kept.producer = None
            txn.client = None
        logger.debug("firesteel.kafka sink: %s: new producer", txn.transactional_id)
        txn.client = self._new_client(txn, consumer)
        # Fences older instances with this id and aborts their open transaction.
        self._transactional(txn, "init_transactions", txn.producer.init_transactions)
        self._start(txn, kept=False)

    def _new_client(self, txn: KafkaTransaction, consumer: Any) -> TransactionalClient:
        from confluent_kafka import Consumer, Producer

        tracker = DeliveryTracker(self.config)
        config = tracked_config(self._producer_config(txn.transactional_id), tracker)
        if consumer is None:
            consumer = Consumer(
                {
                    **consumer_config(self.config),
                    "group.id": self.marker_group(txn.scope.partition_id),
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                }
            )
        return TransactionalClient(Producer(config), tracker, consumer)

    def _start(self, txn: KafkaTransaction, kept: bool) -> bool:
        """Read the marker, then skip or begin the transaction with the marker in it.

        ``False``: the kept producer cannot go on (fenced, or the marker is
        pending in another instance's transaction); nothing was produced.
        """
        from confluent_kafka import KafkaException, TopicPartition

        assert txn.client is not None
        scope = txn.scope
        group = self.marker_group(scope.partition_id)
        try:
            marker = _committed_marker(
                txn.client.marker_consumer,
                TopicPartition(self.marker_topic, 0),
                KEPT_MARKER_TIMEOUT if kept else MARKER_READ_TIMEOUT,
            )
        except KafkaException as exc:
            if kept:
                return self._cannot_continue(txn, f"marker unreadable: {exc.args[0].str()}")
            msg = (
                f"firesteel.kafka sink: {txn.transactional_id}: cannot read its commit marker "
                f"(group {group}): {safe_error(exc, self.config)}"
            )
            raise SinkError(msg) from exc
        if marker.offset >= 0:
            self._check_owner(scope, marker.metadata)
        txn.committed_batch = marker.offset - 1 if marker.offset >= 0 else NO_MARKER
        if txn.committed_batch < scope.batch_id and self._logged_as_committed(scope):
            txn.committed_batch = scope.batch_id
        if txn.committed_batch >= scope.batch_id:
            logger.info(
                "firesteel.kafka sink: %s already committed batch %d (marker %d); skipping",
                txn.transactional_id,
                scope.batch_id,
                txn.committed_batch,
            )
            txn.state = TxnState.SKIPPED
            return True
        if kept and marker.offset >= 0 and marker_writer(marker.metadata) != txn.client.token:
            # Another instance committed since this one's last transaction, so it called
            # init_transactions after this one's: certainly fenced, no need to ask.
            logger.debug("firesteel.kafka sink: %s: kept producer superseded", txn.transactional_id)
            return False
        try:
            txn.producer.begin_transaction()
            self._transactional(txn, "send_offsets_to_transaction", self._send_marker(txn))
        except KafkaException as exc:
            if kept:
                return self._cannot_continue(txn, exc.args[0].str())
            raise
        except SinkError as exc:
            if kept and not _retries_ran_out(exc):
                return self._cannot_continue(txn, str(exc))
            raise
        txn.extractor = _extractor(self.options, txn.producer)
        txn.opened_at = time.monotonic()
        txn.state = TxnState.OPEN
        return True

    def _cannot_continue(self, txn: KafkaTransaction, reason: str) -> bool:
        logger.info(
            "firesteel.kafka sink: %s batch %d: the producer kept from an earlier task cannot "
            "go on (%s); starting a new one",
            txn.transactional_id,
            txn.scope.batch_id,
            scrub(reason, secrets_of(self.config)),
        )
        return False

    def _send_marker(self, txn: KafkaTransaction) -> Any:
        """The call that sets this partition's marker to batch + 1 inside the transaction."""
        from confluent_kafka import TopicPartition

        assert txn.client is not None
        scope = txn.scope
        marker = [
            TopicPartition(
                self.marker_topic,
                0,
                scope.batch_id + 1,
                metadata=marker_metadata(scope.query_id, txn.client.token),
            )
        ]
        metadata = txn.client.marker_consumer.consumer_group_metadata()
        producer = txn.producer
        return lambda timeout: producer.send_offsets_to_transaction(marker, metadata, timeout)

    def _check_owner(self, scope: TaskScope, metadata: str | None) -> None:
        """Refuse a marker another query committed: another checkpoint uses this sink id.

        Each marker carries the query id that committed it
        (:func:`marker_metadata`). The default sink id follows the output
        topics (:func:`firesteel.core.spark.datasource.default_sink_id`), so
        the same job restarted on a deleted and recreated checkpoint finds its
        old markers here, as do two queries sharing an explicit ``sink.id``.
        Batch ids start again at 0 in a new checkpoint: taking the marker
        would skip every batch up to the other query's last (or re-send, once
        past it), so it is a :class:`ConfigError` naming the fix, not a skip.
        The read is the marker read every task does anyway. Markers without
        an owner (older firesteel) are accepted.
        """
        owner = marker_owner(metadata)
        if owner and scope.query_id and owner != scope.query_id:
            output = self.options.topic or self.marker_topic
            msg = (
                f"firesteel.kafka sink: sink {self.sink_id!r} (topic {output!r}) belongs to "
                f"Spark query {owner}, which committed batches there (commit marker, group "
                f"{self.marker_group(scope.partition_id)}), and this is query {scope.query_id} "
                "(another checkpoint, or a deleted and recreated one): its batch ids start "
                "again at 0, so it would write those batches again or skip them. Restart from "
                f"query {owner}'s checkpoint; or, if this is a new stream into {output!r} on "
                "purpose, set option 'sink.new.stream' to true (with an explicit 'sink.id': "
                "give it a new one)"
            )
            raise ConfigError(msg)

    def _marker_key(self, partition: int) -> bytes:
        return f"{self.sink_id}/{partition}".encode()

    def _logged_as_committed(self, scope: TaskScope) -> bool:
        """Whether the marker log holds a committed marker for this task's batch.

        Reads the tail of the marker log (:data:`MARKER_LOG_TAIL` offsets): an
        earlier attempt of this batch wrote its marker after every older batch.
        """
        from confluent_kafka import Consumer, TopicPartition

        from firesteel.testing.kafka.rawlog import read_log

        topic = self.options.marker_log_topic
        if not topic:
            return False
        probe = Consumer({**consumer_config(self.config), "group.id": "firesteel-marker-log"})
        try:
            _low, high = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        finally:
            probe.close()
        key = self._marker_key(scope.partition_id)
        bootstrap = str(self.config.get("bootstrap.servers", ""))
        view = read_log(bootstrap, topic, [0], {0: max(0, high - MARKER_LOG_TAIL)})
        found = any(
            r.key == key and int(r.value or b"-1") >= scope.batch_id for r in view.committed
        )
        if found:
            logger.warning(
                "firesteel.kafka sink: batch %d partition %d committed earlier but the broker "
                "lost its group marker; the marker log says so, skipping",
                scope.batch_id,
                scope.partition_id,
            )
        return found

    def write(self, txn: KafkaTransaction, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if txn.state is TxnState.NEW:
            self._open(txn)
        if txn.state is TxnState.SKIPPED:
            return
        assert txn.extractor is not None
        args = txn.extractor.extract(batch)
        produce_all(txn.producer, args, txn.tracker, txn.transactional_id)
        txn.rows += len(args)
        self._check_age(txn)

    def _check_age(self, txn: KafkaTransaction) -> None:
        age_ms = (time.monotonic() - txn.opened_at) * 1000
        if age_ms > TIMEOUT_MARGIN * self.timeout_ms:
            msg = (
                f"firesteel.kafka sink: {txn.transactional_id}: batch {txn.scope.batch_id} has "
                f"kept its transaction open {age_ms:.0f} ms, close to kafka.transaction.timeout.ms"
                f"={self.timeout_ms}, after which the broker would abort it. Raise the timeout "
                "or lower maxOffsetsPerTrigger; the transaction is aborted and the task retried"
            )
            raise SinkError(msg)

    def _transactional(self, txn: KafkaTransaction, what: str, call: Any) -> None:
        """Run ``call(timeout_seconds)``, retrying retriable errors until ``retry.timeout.ms``.

        librdkafka's rules: retriable errors are retried (each attempt gets the
        time left, at most :data:`CALL_TIMEOUT` seconds), abortable and fatal
        ones fail the task at once. A producer already fenced or fatal is not
        called at all. Past the deadline the task fails with :class:`SinkError`
        naming the transactional id, instead of hanging.
        """
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.options.retry_timeout_ms / 1000
        attempts = 0
        while True:
            if txn.tracker is not None:
                txn.tracker.check_usable(f"{txn.transactional_id} batch {txn.scope.batch_id}")
            left = deadline - time.monotonic()
            try:
                attempts += 1
                call(max(1.0, min(CALL_TIMEOUT, left)))
                return
            except KafkaException as exc:
                error = exc.args[0]
                text = safe_error(exc, self.config)
                if error.retriable() and time.monotonic() < deadline:
                    logger.info("firesteel.kafka sink: %s: %s (retrying)", what, text)
                    time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
                    continue
                if error.retriable():
                    msg = (
                        f"firesteel.kafka sink: {txn.transactional_id} batch "
                        f"{txn.scope.batch_id}: {what} still failed after {attempts} attempts "
                        f"within retry.timeout.ms={self.options.retry_timeout_ms}: {text}. Is the "
                        "cluster reachable and its transaction coordinator available?"
                    )
                    raise SinkError(msg) from exc
                if txn.tracker is not None:
                    txn.tracker.fenced = txn.tracker.fenced or is_fencing(error)
                    if error.fatal():
                        txn.tracker.fatal = txn.tracker.fatal or error.str()
                kind = "abortable" if error.txn_requires_abort() else "fatal"
                msg = (
                    f"firesteel.kafka sink: {txn.transactional_id} batch {txn.scope.batch_id}: "
                    f"{what} failed ({kind}): {text}"
                )
                raise SinkError(msg) from exc

    def pre_commit(self, txn: KafkaTransaction) -> KafkaCommittable:
        scope = txn.scope
        handle = KafkaCommittable(txn.transactional_id, txn.rows, txn.state is TxnState.SKIPPED)
        if txn.state is not TxnState.OPEN:
            self._release(txn)
            return handle
        AFTER_PRODUCE.fire(scope.batch_id, scope.partition_id)
        assert txn.tracker is not None
        flush(txn.producer, txn.tracker, self.options.flush_timeout_ms, txn.transactional_id)
        AFTER_FLUSH.fire(scope.batch_id, scope.partition_id)
        if self.options.marker_log_topic:
            # Same transaction as the data: visible exactly when the data is.
            txn.producer.produce(
                self.options.marker_log_topic,
                str(scope.batch_id).encode(),
                self._marker_key(scope.partition_id),
                0,
            )
        self._check_age(txn)
        BEFORE_COMMIT_TRANSACTION.fire(scope.batch_id, scope.partition_id)
        self._transactional(txn, "commit_transaction", txn.producer.commit_transaction)
        txn.state = TxnState.COMMITTED
        AFTER_COMMIT_TRANSACTION.fire(scope.batch_id, scope.partition_id)
        self._release(txn)
        return handle

    def abort_transaction(self, txn: KafkaTransaction) -> None:
        from confluent_kafka import KafkaException

        if txn.state is TxnState.NEW:
            # Failed while opening: the producer's transaction state is unknown.
            self._drop(txn)
            return
        if txn.state is not TxnState.OPEN:
            self._release(txn)
            return
        txn.state = TxnState.ABORTED
        if txn.tracker is not None and txn.tracker.unusable:
            # Fenced: the newer instance's init_transactions aborted this transaction.
            # Fatal: the broker aborts it at the timeout, or the next instance's
            # init_transactions does. Either way the producer is never called again.
            logger.warning(
                "firesteel.kafka sink: %s is fenced or fatally failed; not aborting through it",
                txn.transactional_id,
            )
            self._drop(txn)
            return
        try:
            txn.producer.abort_transaction(ABORT_TIMEOUT)
        except KafkaException as exc:
            # Fatal (e.g. fenced): the next instance's init_transactions aborts it.
            logger.warning(
                "firesteel.kafka sink: %s: abort failed: %s",
                txn.transactional_id,
                safe_error(exc, self.config),
            )
            self._drop(txn)
            return
        self._release(txn)

    def _release(self, txn: KafkaTransaction) -> None:
        """Give a producer whose transaction ended cleanly to the worker's pool."""
        if txn.client is None:
            return
        if txn.client.tracker.unusable:
            self._drop(txn)
            return
        _TRANSACTIONAL.give(self._pool_key(txn), txn.client)
        txn.client = None

    @staticmethod
    def _drop(txn: KafkaTransaction) -> None:
        if txn.client is not None:
            txn.client.close()
            txn.client = None

    def commit(self, batch_id: int, handles: Sequence[KafkaCommittable]) -> None:
        """Nothing to do: every task committed its own transaction and marker."""
        rows = sum(h.rows for h in handles if not h.skipped)
        skipped = sum(1 for h in handles if h.skipped)
        logger.info(
            "firesteel.kafka sink %s: batch %d committed (%d rows, %d partitions already done)",
            self.sink_id,
            batch_id,
            rows,
            skipped,
        )

    def abort(self, batch_id: int, handles: Sequence[KafkaCommittable]) -> None:
        """Nothing to do: a failed task aborted its transaction; a zombie's is fenced on re-run."""
        logger.warning("firesteel.kafka sink %s: batch %d aborted", self.sink_id, batch_id)
