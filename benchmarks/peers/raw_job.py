"""The raw client's side: Kafka -> Kafka exactly-once written directly on confluent-kafka.

``python raw_job.py BOOTSTRAP SOURCE TARGET [--commit-interval S]``: one process, one
``read_committed`` consumer in a fresh group reading ``SOURCE`` from the beginning, one
transactional producer writing each record's key and value to ``TARGET``; every
``--commit-interval`` seconds (1 s, firesteel's trigger in the throughput workload) the
consumed offsets are sent to the transaction and it commits (Kafka's own
consume-transform-produce loop, what Quix Streams and firesteel's sinks build on). Runs
until killed. What a user writing it by hand would get: the ceiling for any Python
framework on this client in one process.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid

from confluent_kafka import Consumer, Producer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("bootstrap")
    parser.add_argument("source")
    parser.add_argument("target")
    parser.add_argument("--commit-interval", type=float, default=1.0)
    args = parser.parse_args()
    group = f"peers-raw-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "transactional.id": group,
            "linger.ms": 5,
        }
    )
    producer.init_transactions()
    consumer.subscribe([args.source])
    print(json.dumps({"event": "ready"}), flush=True)
    producer.begin_transaction()
    committed_at = time.monotonic()
    while True:
        for message in consumer.consume(10_000, timeout=0.1):
            if message.error() is None:
                while True:
                    try:
                        producer.produce(args.target, message.value(), message.key())
                        break
                    except BufferError:  # the queue is full: let deliveries drain it
                        producer.poll(0.01)
        producer.poll(0)
        if time.monotonic() - committed_at >= args.commit_interval:
            offsets = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata())
            producer.commit_transaction()
            producer.begin_transaction()
            committed_at = time.monotonic()


if __name__ == "__main__":
    main()
