"""Crash-test job: Kafka -> stateful rank per key -> Kafka exactly-once.

Usage: state_job.py <bootstrap> <input> <output> <checkpoint> <state uri> [<marker log>]

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
from firesteel.testing.jobs import job_session
from firesteel.testing.kafka.jobs import KafkaJob


class RankPerKey(processors.RankPerKey):
    """Ranks as Kafka values ``seq:key:rank``."""

    def row(self, seq: int, key: Any, rank: int) -> dict[str, Any]:
        return {"value": f"{seq}:{key}:{rank}".encode()}


def main() -> None:
    job = KafkaJob.parse(sys.argv[1:])
    spark = job_session("kafka-state-job")
    records = (
        job.read(spark, max_offsets=80)
        .selectExpr("CAST(CAST(value AS STRING) AS BIGINT) AS seq")
        .selectExpr("seq", "concat('k', CAST(seq % 5 AS STRING)) AS key")
    )
    ranked = stateful(
        records,
        key=["key"],
        processor=RankPerKey(),
        output_schema="value binary",
        backend=FilesystemBackend(job.argument),
        name="rank",
        parallelism=2,
        max_parallelism=32,
    )
    job.write(spark, ranked, guarantee="exactly-once")


if __name__ == "__main__":
    main()
