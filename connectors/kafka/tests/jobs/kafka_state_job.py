"""Crash-test job: Kafka -> stateful rank per key -> Kafka exactly-once.

Usage: kafka_state_job.py <bootstrap> <input> <output> <checkpoint> <state uri> <marker log>

Input values are sequence numbers ``n`` with key ``k<n % 5>``. The processor
keeps a per-key count in keyed state and emits ``<n>:<key>:<rank>`` per input
record, ``rank`` being the record's 1-based position among its key's records.
Lost or doubled output shows in the sequence count; lost or doubled state
updates show as ranks that are not exactly 1..n per key.
"""

from __future__ import annotations

import sys
from typing import Any

from firesteel.backends import FilesystemBackend
from firesteel.state import KeyedProcessor, KeyState, ValueStateDescriptor, stateful
from firesteel.testing.jobs import job_session


class RankPerKey(KeyedProcessor):
    count = ValueStateDescriptor("count", int)

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        count = state.value(self.count)
        seen = count.value() or 0
        seqs = sorted(rows.column("seq").to_pylist())
        count.update(seen + len(seqs))
        return [
            {"value": f"{seq}:{key[0]}:{seen + index + 1}".encode()}
            for index, seq in enumerate(seqs)
        ]


def main() -> None:
    bootstrap, source, target, checkpoint, state_uri, marker_log = sys.argv[1:7]
    spark = job_session("kafka-state-job")
    records = (
        spark.readStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "80")
        .load()
        .selectExpr("CAST(CAST(value AS STRING) AS BIGINT) AS seq")
        .selectExpr("seq", "concat('k', CAST(seq % 5 AS STRING)) AS key")
    )
    ranked = stateful(
        records,
        key=["key"],
        processor=RankPerKey(),
        output_schema="value binary",
        backend=FilesystemBackend(state_uri),
        name="rank",
        parallelism=2,
        max_parallelism=32,
    )
    query = (
        ranked.writeStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("guarantee", "exactly-once")
        .option("marker.log.topic", marker_log)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
