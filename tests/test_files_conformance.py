"""The file sink runs the sink conformance suite (exactly-once, two-phase commit)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from firesteel.core.guarantee import Guarantee
from firesteel.files.connector import FilesDataSource
from firesteel.testing.sink_suite import SinkCase, SinkSuite

README = Path(__file__).parents[1] / "docs" / "features.md"


def _rows(seqs: Sequence[int]) -> pa.RecordBatch:
    return pa.record_batch({"seq": pa.array(list(seqs), pa.int64())})


@pytest.fixture
def sink_case(tmp_path: Path) -> SinkCase:
    out = tmp_path / "out"

    def read() -> list[int]:
        """pyarrow's own dataset reader, which skips the sink's ``_firesteel/`` folder."""
        if not out.exists():
            return []
        table = ds.dataset(str(out), format="parquet").to_table()
        return [int(s) for s in table.column("seq").to_pylist()] if table.num_rows else []

    return SinkCase(
        claims=Guarantee.EXACTLY_ONCE,
        connector=FilesDataSource,
        options={"path": str(out), "format": "parquet", "sink.id": "conformance"},
        schema=StructType([StructField("seq", LongType())]),
        rows=_rows,
        read=read,
        readme=README,
        readme_row="File sink",
    )


class TestFilesSinkConformance(SinkSuite):
    """Every case of :class:`~firesteel.testing.sink_suite.SinkSuite`."""
