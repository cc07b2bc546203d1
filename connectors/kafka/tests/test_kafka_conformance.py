"""The Kafka sinks run the sink conformance suite: at-least-once and exactly-once."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from firesteel.core.guarantee import Guarantee
from firesteel.kafka.connector import KafkaConnector
from firesteel.testing.kafka import create_topic, read_committed
from firesteel.testing.sink_suite import SinkCase, SinkSuite

README = Path(__file__).parents[3] / "docs" / "features.md"

pytestmark = pytest.mark.usefixtures("worker_pool")


def _rows(seqs: Sequence[int]) -> pa.RecordBatch:
    return pa.record_batch({"value": pa.array([str(s).encode() for s in seqs], pa.binary())})


@pytest.fixture(params=[Guarantee.AT_LEAST_ONCE, Guarantee.EXACTLY_ONCE], ids=lambda g: g.label)
def sink_case(request: pytest.FixtureRequest, bootstrap: str, tmp_path: Path) -> SinkCase:
    topic = create_topic(bootstrap, partitions=1)

    def read() -> list[int]:
        return [int(r.value or b"") for r in read_committed(bootstrap, topic)]

    return SinkCase(
        claims=request.param,
        connector=KafkaConnector,
        options={
            "kafka.bootstrap.servers": bootstrap,
            "topic": topic,
            "guarantee": request.param.label,
            "checkpointLocation": str(tmp_path / "ck"),
        },
        schema=StructType([StructField("value", BinaryType())]),
        rows=_rows,
        read=read,
        readme=README,
        readme_row="Kafka sinks",
    )


class TestKafkaSinkConformance(SinkSuite):
    """Every case of :class:`~firesteel.testing.sink_suite.SinkSuite`, per guarantee."""
