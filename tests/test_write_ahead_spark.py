"""The write-ahead-log sink inside a real streaming query (foreachBatch), and its guarantee."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.errors import StreamingQueryException

from firesteel.core import Guarantee, foreach_batch, layout
from firesteel.core.checkpoint import read_guarantee
from firesteel.sinks.committers import FileCheckpointCommitter
from firesteel.testing import assert_exactly_once
from firesteel.testing.scripts.wal_target import (
    JsonLinesWalSink,
    SqliteUpsertWalSink,
    read_jsonl,
    read_sqlite,
)

# Spark's Python workers cannot import this test folder: ship the test sinks by value.


def _input(folder: Path, files: int = 4, rows: int = 25) -> range:
    folder.mkdir(parents=True)
    for index in range(files):
        seqs = range(index * rows, (index + 1) * rows)
        pq.write_table(pa.table({"seq": pa.array(seqs, pa.int64())}), folder / f"f{index}.parquet")
    return range(files * rows)


def _run(spark, source: Path, sink, checkpoint: Path, required: Guarantee | None) -> None:
    records = (
        spark.readStream.format("firesteel.files")
        .option("format", "parquet")
        .option("max.files.per.batch", 2)
        .load(str(source))
        .repartition(2, "seq")
    )
    query = (
        records.writeStream.foreachBatch(foreach_batch(sink, str(checkpoint), required))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def _sink(cls, tmp_path: Path, target: Path):
    checkpoint = tmp_path / "ck"
    return cls(
        "wal-spark",
        layout.write_ahead_log(str(checkpoint)),
        FileCheckpointCommitter.for_checkpoint(str(checkpoint)),
        str(target),
    )


def test_plain_wal_target_is_certified_at_least_once_and_sends_each_row_once(
    spark, tmp_path: Path
) -> None:
    expected = _input(tmp_path / "in")
    target = tmp_path / "out.jsonl"
    sink = _sink(JsonLinesWalSink, tmp_path, target)
    _run(spark, tmp_path / "in", sink, tmp_path / "ck", Guarantee.AT_LEAST_ONCE)
    assert_exactly_once([r["seq"] for r in read_jsonl(str(target))], expected)
    assert read_guarantee(str(tmp_path / "ck"))["wal-spark"]["achieved"] == "at-least-once"
    # Every segment was sent and then deleted from the log.
    # No segment is left; only the newest batch's plan stays (Spark may re-run that batch).
    log = tmp_path / "ck" / "firesteel" / "wal" / "wal-spark"
    assert [p.name for p in log.iterdir()] == ["plans"]
    assert len(list((log / "plans").iterdir())) == 1


def test_plain_wal_target_refuses_exactly_once(spark, tmp_path: Path) -> None:
    _input(tmp_path / "in")
    target = tmp_path / "out.jsonl"
    sink = _sink(JsonLinesWalSink, tmp_path, target)
    # The GuaranteeError raised in the first batch fails the query before any send.
    with pytest.raises(
        StreamingQueryException, match="write-ahead-log sink, which gives at-least-once"
    ):
        _run(spark, tmp_path / "in", sink, tmp_path / "ck", Guarantee.EXACTLY_ONCE)
    assert read_jsonl(str(target)) == []


def test_upsert_wal_target_is_certified_exactly_once_and_holds_each_row_once(
    spark, tmp_path: Path
) -> None:
    expected = _input(tmp_path / "in")
    target = tmp_path / "out.db"
    sink = _sink(SqliteUpsertWalSink, tmp_path, target)
    _run(spark, tmp_path / "in", sink, tmp_path / "ck", Guarantee.EXACTLY_ONCE)
    assert_exactly_once(read_sqlite(str(target)), expected)
    assert read_guarantee(str(tmp_path / "ck"))["wal-spark"]["achieved"] == "exactly-once"
