"""The Kafka sinks, one module per concept.

* :mod:`.plain`: :class:`KafkaSink`, ``guarantee`` none or at-least-once;
* :mod:`.exactly_once`: :class:`KafkaExactlyOnceSink`, one transaction per task,
  committed in the task (the protocol is in its module docs), with
  :mod:`.transaction` (a task's transaction and its vote), :mod:`.naming`
  (transactional ids and marker groups), :mod:`.marker` (the commit marker:
  metadata codec and group-offset read), :mod:`.markerlog` (the optional
  marker log), :mod:`.retry` (the transactional calls' retry policy);
* :mod:`.brokers`: the driver's checks of the cluster before the first task.
"""

from firesteel.kafka.sink.exactly_once import KafkaExactlyOnceSink
from firesteel.kafka.sink.plain import KafkaSink
from firesteel.kafka.sink.transaction import KafkaCommittable

__all__ = ["KafkaCommittable", "KafkaExactlyOnceSink", "KafkaSink"]
