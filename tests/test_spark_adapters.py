"""The Spark adapters end to end: offsets tagging, admission control, votes, guarantee check.

The connector here is test-only: a counting source and a two-phase-commit sink
that publishes one JSON file per batch by rename, so the tests see exactly
what the driver committed.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark import cloudpickle
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from firesteel.core import foreach_batch, register
from firesteel.core.checkpoint import read_guarantee
from firesteel.core.context import TaskScope
from firesteel.core.guarantee import Guarantee
from firesteel.core.sink import CommitOutcome, Committable, Sink, TwoPhaseCommitSink
from firesteel.core.source import Offset, ReadLimit, ResettableSource
from firesteel.core.spark.datasource import FiresteelDataSource, default_sink_id

# Spark's Python workers cannot import this test module; ship it by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class CountingSource(ResettableSource):
    name = "firesteel.counting"

    def __init__(self, total: int, per_batch: int | None) -> None:
        self.total = total
        self.per_batch = per_batch

    def schema(self) -> pa.Schema:
        return pa.schema([("seq", pa.int64())])

    def initial_offset(self) -> Offset:
        return {"next": 0}

    def default_limit(self) -> ReadLimit:
        return ReadLimit(max_records=self.per_batch)

    def latest_offset(self, start: Offset, limit: ReadLimit) -> Offset:
        step = limit.max_records or self.total
        return {"next": min(start["next"] + step, self.total)}

    def partitions(self, start: Offset, end: Offset) -> Sequence[Any]:
        middle = (start["next"] + end["next"]) // 2
        return [(start["next"], middle), (middle, end["next"])]

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        yield pa.record_batch([pa.array(range(*partition), pa.int64())], names=["seq"])


@dataclass(frozen=True)
class PendingJson(Committable):
    pending: str
    final: str


class JsonBatchSink(TwoPhaseCommitSink[dict[str, Any], PendingJson]):
    """Tasks write pending JSON files; commit renames them to ``batch-N-part-P.json``."""

    name = "firesteel.counting"
    committable_type = PendingJson

    def __init__(self, out: str, sink_id: str) -> None:
        self.out = out
        self.sink_id = sink_id

    def begin_transaction(self, scope: TaskScope) -> dict[str, Any]:
        return {"scope": scope, "rows": []}

    def write(self, txn: dict[str, Any], batch: pa.RecordBatch) -> None:
        txn["rows"].extend(batch.column(0).to_pylist())

    def pre_commit(self, txn: dict[str, Any]) -> PendingJson:
        scope = txn["scope"]
        pending = os.path.join(self.out, f".pending-{scope.batch_id}-{scope.partition_id}")
        with open(pending, "w") as handle:
            json.dump(txn["rows"], handle)
        final = os.path.join(self.out, f"batch-{scope.batch_id}-part-{scope.partition_id}.json")
        return PendingJson(pending, final)

    def abort_transaction(self, txn: dict[str, Any]) -> None:
        txn["rows"].clear()

    def commit(self, batch_id: int, handles: Sequence[PendingJson]) -> CommitOutcome:
        for handle in handles:
            if os.path.exists(handle.pending):
                os.replace(handle.pending, handle.final)
        return CommitOutcome.COMMITTED

    def abort(self, batch_id: int, handles: Sequence[PendingJson]) -> None:
        for handle in handles:
            if os.path.exists(handle.pending):
                os.remove(handle.pending)


class CountingDataSource(FiresteelDataSource):
    connector = "counting"

    def create_source(self, schema: StructType | None) -> ResettableSource:
        per_batch = self.options.get("per.batch")
        return CountingSource(int(self.options["total"]), int(per_batch) if per_batch else None)

    def create_sink(self, schema: StructType) -> tuple[Sink, Guarantee | None]:
        required = self.options.get("guarantee")
        sink = JsonBatchSink(self.options["path"], default_sink_id(dict(self.options)))
        return sink, Guarantee.parse(required) if required else None


@pytest.fixture(scope="module")
def counting(spark: SparkSession) -> SparkSession:
    spark.dataSource.register(CountingDataSource)
    return spark


def committed(out: Path) -> dict[int, list[int]]:
    batches: dict[int, list[int]] = {}
    for path in sorted(out.glob("batch-*.json")):
        batch = int(path.name.split("-")[1])
        batches.setdefault(batch, []).extend(json.loads(path.read_text()))
    return batches


def test_available_now_respects_admission_control(counting: SparkSession, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    query = (
        counting.readStream.format("firesteel.counting")
        .option("total", "25")
        .option("per.batch", "10")
        .load()
        .writeStream.format("firesteel.counting")
        .option("path", str(out))
        .option("guarantee", "exactly-once")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    batches = committed(out)
    assert {b: sorted(v) for b, v in batches.items()} == {
        0: list(range(10)),
        1: list(range(10, 20)),
        2: list(range(20, 25)),
    }
    end = json.loads(query.lastProgress["sources"][0]["endOffset"])
    assert end == {
        "firesteel": {"source": "firesteel.counting", "replay": "resettable"},
        "offset": {"next": 25},
    }
    records = read_guarantee(str(tmp_path / "ck"))
    assert [r["achieved"] for r in records.values()] == ["exactly-once"]


def test_restart_continues_from_checkpoint(counting: SparkSession, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()

    def run(total: int) -> None:
        (
            counting.readStream.format("firesteel.counting")
            .option("total", str(total))
            .load()
            .writeStream.format("firesteel.counting")
            .option("path", str(out))
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
            .awaitTermination(120)
        )

    run(5)
    run(8)
    seqs = sorted(s for rows in committed(out).values() for s in rows)
    assert seqs == list(range(8))


def test_spark_file_source_is_certified_resettable_for_an_exactly_once_sink(
    counting: SparkSession, tmp_path: Path
) -> None:
    """Spark's own parquet source is resettable (its offsets are a log index): certified."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from firesteel.core.checkpoint import read_guarantee

    source = tmp_path / "in"
    source.mkdir()
    pq.write_table(pa.table({"seq": list(range(6))}), source / "part-0.parquet")
    out = tmp_path / "out"
    out.mkdir()
    checkpoint = str(tmp_path / "ck")
    (
        counting.readStream.schema("seq long")
        .parquet(str(source))
        .writeStream.format("firesteel.counting")
        .option("path", str(out))
        .option("guarantee", "exactly-once")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
        .awaitTermination(120)
    )
    assert sorted(s for rows in committed(out).values() for s in rows) == list(range(6))
    (record,) = read_guarantee(checkpoint).values()
    assert record["achieved"] == "exactly-once"
    assert record["sources"] == [
        "source #0 (Spark's file source; replays its batches from its own metadata log)"
    ]


def test_non_firesteel_source_is_refused_for_exactly_once(
    counting: SparkSession, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    query = (
        counting.readStream.format("rate")
        .option("rowsPerSecond", "5")
        .load()
        .writeStream.format("firesteel.counting")
        .option("path", str(out))
        .option("guarantee", "exactly-once")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    with pytest.raises(StreamingQueryException) as info:
        query.awaitTermination(120)
    message = str(info.value)
    assert "GuaranteeError" in message
    assert "source #0 (not a source firesteel knows" in message
    assert committed(out) == {}


def test_foreach_batch_commits_through_the_same_protocol(
    counting: SparkSession, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    checkpoint = str(tmp_path / "ck")
    sink = JsonBatchSink(str(out), "foreach-sink")
    (
        counting.readStream.format("firesteel.counting")
        .option("total", "12")
        .option("per.batch", "5")
        .load()
        .writeStream.foreachBatch(foreach_batch(sink, checkpoint, Guarantee.EXACTLY_ONCE))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
        .awaitTermination(120)
    )
    seqs = sorted(s for rows in committed(out).values() for s in rows)
    assert seqs == list(range(12))
    assert read_guarantee(checkpoint)["foreach-sink"]["achieved"] == "exactly-once"


def test_register_finds_installed_connectors(spark: SparkSession) -> None:
    names = register(spark)
    assert "firesteel.files" in names
