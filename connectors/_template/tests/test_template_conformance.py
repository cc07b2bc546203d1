"""The template sink runs the sink conformance suite (exactly-once, idempotent)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from firesteel.core.spi import Guarantee
from firesteel.template.connector import TemplateConnector
from firesteel.testing.sink_suite import SinkCase, SinkSuite

README = Path(__file__).parents[1] / "README.md"


def _rows(seqs: Sequence[int]) -> pa.RecordBatch:
    return pa.record_batch({"seq": pa.array(list(seqs), pa.int64())})


@pytest.fixture
def sink_case(tmp_path: Path) -> SinkCase:
    out = tmp_path / "out"

    def read() -> list[int]:
        return [json.loads(line)["seq"] for p in out.glob("*.jsonl") for line in p.open()]

    return SinkCase(
        claims=Guarantee.EXACTLY_ONCE,
        connector=TemplateConnector,
        options={"path": str(out), "sink.id": "conformance"},
        schema=StructType([StructField("seq", LongType())]),
        rows=_rows,
        read=read,
        readme=README,
        readme_row="`TemplateSink`",
    )


class TestTemplateSinkConformance(SinkSuite):
    """Every case of :class:`~firesteel.testing.sink_suite.SinkSuite`."""
