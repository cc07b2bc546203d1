"""Kafka connector for firesteel: a resettable source and at-least-once / exactly-once sinks.

Registered as ``firesteel.kafka`` (entry point group ``firesteel.connectors``)::

    from firesteel.core import register
    register(spark)
    df = (spark.readStream.format("firesteel.kafka")
          .option("kafka.bootstrap.servers", "host:9092").option("subscribe", "in").load())
    df.writeStream.format("firesteel.kafka").option("kafka.bootstrap.servers", "host:9092")
      .option("topic", "out").option("guarantee", "exactly-once")
      .option("checkpointLocation", "/ck").start()
"""

from firesteel.kafka.connector import KafkaConnector
from firesteel.kafka.options import KafkaSinkOptions, KafkaSourceOptions
from firesteel.kafka.sink import KafkaExactlyOnceSink, KafkaSink, KafkaWriteAheadSink
from firesteel.kafka.source import KafkaSource

__all__ = [
    "KafkaConnector",
    "KafkaExactlyOnceSink",
    "KafkaSink",
    "KafkaSinkOptions",
    "KafkaSource",
    "KafkaSourceOptions",
    "KafkaWriteAheadSink",
]
