"""Crash-test job: Kafka -> stateful rank per key -> Kafka exactly-once.

Usage: state_job.py <bootstrap> <input> <output> <checkpoint> <state uri> <exactly-once mode>

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
from firesteel.state import stateful
from firesteel.testing import processors
from firesteel.testing.jobs import job_session, read_kafka_topic, write_kafka_topic


class RankPerKey(processors.RankPerKey):
    """Ranks as Kafka values ``seq:key:rank``."""

    def row(self, seq: int, key: Any, rank: int) -> dict[str, Any]:
        return {"value": f"{seq}:{key}:{rank}".encode()}


def main() -> None:
    bootstrap, source, target, checkpoint, state_uri, mode = sys.argv[1:7]
    spark = job_session("kafka-state-job")
    records = (
        read_kafka_topic(spark, bootstrap, source, checkpoint, "80")
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
    write_kafka_topic(
        spark,
        ranked,
        bootstrap,
        target,
        checkpoint,
        guarantee="exactly-once",
        mode=mode,
    )


if __name__ == "__main__":
    main()
