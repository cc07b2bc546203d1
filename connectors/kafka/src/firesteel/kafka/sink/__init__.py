"""The Kafka sinks, one module per concept.

* :mod:`.plain`: :class:`KafkaSink`, ``guarantee`` none or at-least-once;
* :mod:`.write_ahead`: :class:`KafkaWriteAheadSink`, ``guarantee`` exactly-once in
  the default ``exactly.once.mode=write-ahead``: tasks log, the batch's commit sends
  each segment of its recorded plan in its own transaction;
* :mod:`.transactions`: :class:`~.transactions.KafkaTransactions`, the one
  transactions engine of both exactly-once modes (one transaction per batch and
  key, with its marker), with :mod:`.transaction` (one transaction and its vote), :mod:`.naming`
  (transactional ids and marker groups), :mod:`.marker` (the commit marker:
  metadata codec and group-offset read), :mod:`.retry` (the transactional calls' retry policy);
* :mod:`.exactly_once`: :class:`KafkaExactlyOnceSink`, ``exactly.once.mode=in-task``,
  where each task commits its own transaction, with :mod:`.partition_count` (the
  in-task mode's partition-count check);
* :mod:`.brokers`: the driver's checks of the cluster before the first task.
"""

from firesteel.kafka.sink.exactly_once import KafkaExactlyOnceSink
from firesteel.kafka.sink.plain import KafkaSink
from firesteel.kafka.sink.transaction import KafkaCommittable
from firesteel.kafka.sink.write_ahead import KafkaWriteAheadSink

__all__ = ["KafkaCommittable", "KafkaExactlyOnceSink", "KafkaSink", "KafkaWriteAheadSink"]
