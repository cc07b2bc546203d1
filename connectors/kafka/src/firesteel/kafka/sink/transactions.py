"""One Kafka transactions engine for both exactly-once modes.

:class:`KafkaTransactions` runs one Kafka transaction per (batch N, key p) with
its commit marker: the producer of ``transactional.id = <prefix>-<S>-<p>`` (kept
in the worker's pool, or new and ``init_transactions``, which fences older
instances), the marker read (N already committed: write nothing), the marker
moved to N + 1 inside the transaction, the rows produced, one
``commit_transaction``. The in-task sink
(:class:`~firesteel.kafka.sink.exactly_once.KafkaExactlyOnceSink`, p the Spark
partition) is these transactions run by its write tasks; the write-ahead sink
(:class:`~firesteel.kafka.sink.write_ahead.KafkaWriteAheadSink`, p a segment of
the batch's recorded plan) runs them from the batch's commit. One transaction's
state and its vote are :mod:`firesteel.kafka.sink.transaction`'s. Each step, kept
producers and fencing: the connector's README, "Exactly-once".

A task counts, in its metrics (:func:`~firesteel.core.toolkit.task_metrics`), ``producers_fenced``
(a kept producer found fenced or superseded, replaced by a new one) and
``partitions_already_committed`` (the marker said a re-run's partition had committed).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pyarrow as pa

from firesteel.core.spi import SinkError
from firesteel.core.toolkit import Ownership, has_committed, task_metrics, timed
from firesteel.kafka.config import (
    client_config,
    consumer_config,
    redact,
    safe_error,
    scrub,
    secrets_of,
)
from firesteel.kafka.options import KafkaSinkOptions
from firesteel.kafka.outage import Outage
from firesteel.kafka.pool import TransactionalClient, TransactionalPool, config_key
from firesteel.kafka.produce_args import sink_extractor
from firesteel.kafka.producing import DeliveryTracker, flush, produce_all, tracked_config
from firesteel.kafka.sink import brokers
from firesteel.kafka.sink.marker import (
    committed_batch,
    committed_marker,
    marker_metadata,
    marker_owner,
    marker_writer,
)
from firesteel.kafka.sink.naming import TransactionNames
from firesteel.kafka.sink.points import (
    AFTER_COMMIT_TRANSACTION,
    AFTER_FLUSH,
    AFTER_PRODUCE,
    BEFORE_COMMIT_TRANSACTION,
)
from firesteel.kafka.sink.retry import TransactionalRetry
from firesteel.kafka.sink.transaction import (
    KafkaCommittable,
    KafkaTransaction,
    TransactionScope,
    TxnState,
)

logger = logging.getLogger(__name__)

TIMEOUT_MARGIN = 0.8
"""A task aborts its transaction once it has been open this fraction of the timeout."""
ABORT_TIMEOUT = 30
"""Seconds an ``abort_transaction`` may take."""
KEPT_MARKER_TIMEOUT = 5.0
"""How long a kept producer's task waits for its marker before it starts over with a new one."""
FIRST_RECONNECT_MS = 10
"""``reconnect.backoff.ms`` of the transactional producers and marker consumers unless the
user sets it: librdkafka's 100 ms default delays the connection to the broker a new client
learns from the bootstrap reply, which cost a new producer 60 ms before ``init_transactions``
returned and a marker read 58 ms (20 and 18 ms with 10). Repeated failures still back off
exponentially up to ``reconnect.backoff.max.ms``."""

_TRANSACTIONAL = TransactionalPool()
"""This worker's transactional producers kept between tasks, by transactional id."""


class KafkaTransactions:
    """The transactions of one exactly-once Kafka sink, and its marker reads.

    ``sole_sender``: this process sends every transaction of the sink (the write-ahead
    mode's sends on the driver), so a kept producer trusts its own last marker instead of
    reading it. ``checkpoint`` is the query's: one that committed a batch waits out an
    outage in the driver's check of the cluster (:meth:`check_target`) too.

    Per transaction: :meth:`begin`, :meth:`open` (False: the marker says an earlier
    attempt committed it, write nothing), :meth:`write` for each record batch, then
    :meth:`pre_commit` commits it and returns its committable, or
    :meth:`abort_transaction` on any failure.

    Brokers away for a while are waited out for option ``retry.timeout.ms`` in the
    marker reads, the transactional calls (:mod:`firesteel.kafka.sink.retry`) and the
    flush, whose records librdkafka keeps queued in the open transaction. Its
    ``message.timeout.ms`` is the transaction's timeout unless set: an outage longer
    than ``kafka.transaction.timeout.ms`` (default 60 s) while a transaction is open
    fails its records, so the transaction is aborted and the task fails for Spark to
    retry it (the marker makes the retry write the rows once).
    """

    def __init__(
        self,
        options: KafkaSinkOptions,
        sink_id: str,
        checkpoint: str = "",
        sole_sender: bool = False,
    ) -> None:
        self.options = options
        self.sole_sender = sole_sender
        self.sink_id = sink_id
        self.checkpoint = checkpoint
        self.timeout_ms = options.transaction_timeout_ms()
        self.marker_topic = options.marker_topic or options.topic or ""
        self.config = {
            "reconnect.backoff.ms": FIRST_RECONNECT_MS,
            **client_config(options.passthrough),
        }
        self.names = TransactionNames(options.transactional_id_prefix, sink_id)
        self.retry = TransactionalRetry(options.retry_timeout_ms, self.config)

    def check_target(self) -> None:
        """Check the marker topic exists and the timeout fits the broker's cap
        (:func:`~firesteel.kafka.sink.brokers.check_transactional_target`)."""
        patience = self.options.retry_timeout_ms if has_committed(self.checkpoint) else None
        if brokers.check_transactional_target(
            self.config, self.marker_topic, self.timeout_ms, patience
        ):
            logger.info(
                "firesteel.kafka sink %s: exactly-once, producer %s",
                self.sink_id,
                redact(self.config),
            )

    def begin(self, scope: TransactionScope) -> KafkaTransaction:
        """A new transaction for ``scope`` (a task's, or a write-ahead segment's)."""
        return KafkaTransaction(scope, self.names.transactional_id(scope.partition_id))

    def _producer_config(self, transactional_id: str) -> dict[str, Any]:
        config = {**self.config, "transactional.id": transactional_id}
        config.setdefault("transaction.timeout.ms", self.timeout_ms)
        return config

    def _pool_key(self, txn: KafkaTransaction) -> tuple[Any, ...]:
        return config_key(self._producer_config(txn.transactional_id))

    def _open(self, txn: KafkaTransaction) -> None:
        """Steps 1-3 of the README's "Exactly-once": a kept producer if it still may, else a
        new one."""
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
        with timed("kafka.new_producer"):
            txn.client = self._new_client(txn, consumer)
            # Fences older instances with this id and aborts their open transaction.
            self._transactional(txn, "init_transactions", txn.producer.init_transactions)
        self._start(txn, kept=False)

    def _new_client(self, txn: KafkaTransaction, consumer: Any) -> TransactionalClient:
        from confluent_kafka import Producer

        tracker = DeliveryTracker(self.config)
        config = tracked_config(self._producer_config(txn.transactional_id), tracker)
        if consumer is None:
            consumer = self._marker_consumer(txn.scope.partition_id)
        return TransactionalClient(Producer(config), tracker, consumer)

    def _marker_consumer(self, key: int) -> Any:
        """A consumer of the marker group of ``key``, which only reads its committed offset.

        ``read_committed`` makes librdkafka ask for stable offsets: while a transaction
        carrying the marker is still completing the broker answers UNSTABLE_OFFSET_COMMIT
        and the read waits, instead of returning the older marker (or none), which would
        let a second query write where the first one just committed."""
        from confluent_kafka import Consumer

        return Consumer(
            {
                **consumer_config(self.config),
                "group.id": self.names.marker_group(key),
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )

    def _start(self, txn: KafkaTransaction, kept: bool) -> bool:
        """Read the marker, then skip or begin the transaction with the marker in it.

        ``False``: the kept producer cannot go on (fenced, or the marker is
        pending in another instance's transaction); nothing was produced.
        """
        from confluent_kafka import KafkaException, TopicPartition

        assert txn.client is not None
        scope = txn.scope
        group = self.names.marker_group(scope.partition_id)
        consumer = txn.client.marker_consumer
        partition = TopicPartition(self.marker_topic, 0)
        known = txn.client.marker if kept and self.sole_sender else None
        if known is not None and known[0] == scope.query_id:
            return self._continue(txn, known[1], kept)
        try:
            with timed("kafka.marker_read"):
                if kept:
                    marker = committed_marker(consumer, partition, KEPT_MARKER_TIMEOUT)
                else:
                    marker = self.outage().run(
                        lambda timeout: committed_marker(consumer, partition, timeout),
                        f"{txn.transactional_id} batch {scope.batch_id}: commit marker "
                        f"(group {group})",
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
        txn.client.marker = (scope.query_id, committed_batch(marker.offset))
        superseded = marker.offset >= 0 and marker_writer(marker.metadata) != txn.client.token
        if kept and superseded and committed_batch(marker.offset) < scope.batch_id:
            # Another instance committed since this one's last transaction, so it called
            # init_transactions after this one's: certainly fenced, no need to ask.
            logger.debug("firesteel.kafka sink: %s: kept producer superseded", txn.transactional_id)
            task_metrics().count("producers_fenced")
            return False
        return self._continue(txn, committed_batch(marker.offset), kept)

    def _continue(self, txn: KafkaTransaction, committed: int, kept: bool) -> bool:
        """Skip the transaction if the marker says ``committed`` covers its batch, else begin
        it with the marker set inside; ``False`` as :meth:`_start` says."""
        from confluent_kafka import KafkaException

        scope = txn.scope
        txn.committed_batch = committed
        if txn.committed_batch >= scope.batch_id:
            logger.info(
                "firesteel.kafka sink: %s already committed batch %d (marker %d); skipping",
                txn.transactional_id,
                scope.batch_id,
                txn.committed_batch,
            )
            txn.state = TxnState.SKIPPED
            task_metrics().count("partitions_already_committed")
            return True
        # Timed from before the broker's clock starts (its first AddOffsetsToTxn), so the
        # age _check_age sees is never less than the broker's.
        txn.opened_at = time.monotonic()
        try:
            txn.producer.begin_transaction()
            with timed("kafka.send_offsets"):
                self._transactional(txn, "send_offsets_to_transaction", self._send_marker(txn))
        except KafkaException as exc:
            if kept:
                return self._cannot_continue(txn, exc.args[0].str())
            raise
        except SinkError as exc:
            # Refused (fenced, abortable); an outage past retry.timeout.ms is no SinkError.
            if kept:
                return self._cannot_continue(txn, str(exc))
            raise
        txn.extractor = sink_extractor(self.options, txn.producer)
        txn.state = TxnState.OPEN
        return True

    def _cannot_continue(self, txn: KafkaTransaction, reason: str) -> bool:
        task_metrics().count("producers_fenced")
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

    def _check_owner(self, scope: TransactionScope, metadata: str | None) -> None:
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
        output = self.options.topic or self.marker_topic
        Ownership(
            subject=f"firesteel.kafka sink: sink {self.sink_id!r} (topic {output!r}, commit "
            f"marker group {self.names.marker_group(scope.partition_id)})",
            query_id=scope.query_id or None,
            remedy=f"Restart from the owner's checkpoint; or, if this is a new stream into "
            f"{output!r} on purpose, set option 'sink.new.stream' to true (with an explicit "
            "'sink.id': give it a new one)",
        ).check(marker_owner(metadata))

    def open(self, txn: KafkaTransaction) -> bool:
        """Steps 1-3 of the README's "Exactly-once" now, before any row; whether there is
        anything to send (``False``: the marker says the batch was committed, the
        transaction skipped)."""
        if txn.state is TxnState.NEW:
            self._open(txn)
        return txn.state is not TxnState.SKIPPED

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

    def outage(self) -> Outage:
        """A new window of ``retry.timeout.ms`` for one operation."""
        return Outage("firesteel.kafka sink", self.config, self.options.retry_timeout_ms)

    def _transactional(self, txn: KafkaTransaction, what: str, call: Any) -> None:
        """Run ``call(timeout_seconds)`` under the sink's :class:`TransactionalRetry`."""
        self.retry.run(call, what, txn.transactional_id, txn.scope.batch_id, txn.tracker)

    def pre_commit(self, txn: KafkaTransaction) -> KafkaCommittable:
        scope = txn.scope
        handle = KafkaCommittable(txn.transactional_id, txn.rows, txn.state is TxnState.SKIPPED)
        if txn.state is not TxnState.OPEN:
            self._release(txn)
            return handle
        AFTER_PRODUCE.fire(scope.batch_id, scope.partition_id)
        assert txn.tracker is not None
        with timed("kafka.flush"):
            flush(
                txn.producer,
                txn.tracker,
                self.options.flush_timeout_ms,
                txn.transactional_id,
                self.outage(),
            )
        AFTER_FLUSH.fire(scope.batch_id, scope.partition_id)
        self._check_age(txn)
        BEFORE_COMMIT_TRANSACTION.fire(scope.batch_id, scope.partition_id)
        with timed("kafka.commit_transaction"):
            self._transactional(txn, "commit_transaction", txn.producer.commit_transaction)
        txn.state = TxnState.COMMITTED
        assert txn.client is not None
        txn.client.marker = (scope.query_id, scope.batch_id)
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
        if txn.client is not None:
            # An abort may follow a commit whose outcome is unknown: read the marker next time.
            txn.client.marker = None
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

    def committed_at(self, key: int, batch_id: int) -> bool:
        """Whether the marker of ``key`` (a Spark partition or plan segment) covers
        ``batch_id``; read on the driver, with a consumer of that marker's group."""
        from confluent_kafka import KafkaException, TopicPartition

        group = self.names.marker_group(key)
        consumer = self._marker_consumer(key)
        partition = TopicPartition(self.marker_topic, 0)
        try:
            marker = self.outage().run(
                lambda timeout: committed_marker(consumer, partition, timeout),
                f"batch {batch_id}: commit marker (group {group})",
            )
        except KafkaException as exc:
            msg = (
                f"firesteel.kafka sink {self.sink_id}: cannot read the commit marker of group "
                f"{group}: {safe_error(exc, self.config)}"
            )
            raise SinkError(msg) from exc
        finally:
            consumer.close()
        return committed_batch(marker.offset) >= batch_id
