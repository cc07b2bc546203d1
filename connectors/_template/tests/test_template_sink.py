"""The template connector: exactly-once with a resettable source, bad options, re-runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from firesteel.core.spi import TaskScope
from firesteel.template.sink import TemplateSink


def read_lines(folder: Path) -> list[dict[str, Any]]:
    """Every row in the output, read with plain json (not the connector's code)."""
    return [json.loads(line) for path in folder.glob("*.jsonl") for line in path.open()]


def test_spark_file_source_to_template_sink_is_certified_and_writes_each_row_once(
    spark: Any, tmp_path: Path
) -> None:
    source = tmp_path / "in"
    source.mkdir()
    for index in range(3):
        seqs = list(range(index * 10, index * 10 + 10))
        pq.write_table(pa.table({"seq": seqs}), source / f"part-{index}.parquet")
    out = tmp_path / "out"
    query = (
        spark.readStream.schema("seq long")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(source))
        .writeStream.format("firesteel.template")
        .option("path", str(out))
        .option("guarantee", "exactly-once")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(row["seq"] for row in read_lines(out)) == list(range(30))


def test_a_rerun_with_fewer_partitions_leaves_no_stale_rows(tmp_path: Path) -> None:
    sink = TemplateSink(str(tmp_path), "s1")
    sink.prepare()
    rows = pa.record_batch({"seq": list(range(8))})

    def part(partition: int, count: int) -> pa.RecordBatch:
        return rows.filter(pa.array([s % count == partition for s in range(8)]))

    for partition in range(4):  # attempt 1: four partitions, crash before commit
        sink.write_partition(TaskScope("q", 0, partition, 0), iter([part(partition, 4)]))
    votes = [sink.write_partition(TaskScope("q", 0, p, 1), iter([part(p, 2)])) for p in range(2)]
    sink.commit_batch(0, votes)
    assert sorted(row["seq"] for row in read_lines(tmp_path)) == list(range(8))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"path": "relative/out"}, "option 'path' must be absolute"),
        ({"path": "/tmp/x", "pth": "/tmp/y"}, "pth"),
        ({}, "path"),
    ],
)
def test_bad_options_are_named(
    spark: Any, tmp_path: Path, options: dict[str, str], message: str
) -> None:
    writer = spark.readStream.format("rate").load().writeStream.format("firesteel.template")
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.option("checkpointLocation", str(tmp_path / "ck")).start()
    with pytest.raises(Exception, match=message):
        query.awaitTermination(60)
    assert isinstance(query.exception(), Exception)
    assert "ConfigError" in str(query.exception())
