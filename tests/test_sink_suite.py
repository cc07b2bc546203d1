"""The sink conformance suite itself: it passes a sink that keeps its claim and fails one
that claims more than it gives (a plain sink whose re-runs add their rows again; a
write-ahead log whose re-runs send again into an upsert target, seen only in the target's
count of writes)."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from firesteel.core.context import TaskScope
from firesteel.core.guarantee import Guarantee
from firesteel.core.sink import PlainSink, Sink
from firesteel.core.spark.datasource import FiresteelDataSource
from firesteel.sinks.committers import FileCheckpointCommitter
from firesteel.testing.scripts.wal_target import SqliteUpsertWalSink, read_sqlite, read_writes
from firesteel.testing.sink_suite import SinkCase, SinkSuite


class AppendingSink(PlainSink):
    """Each task attempt writes a new JSON-lines file: a re-run duplicates its rows."""

    name: ClassVar[str] = "firesteel.appending"

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.sink_id = "appending"

    def write(self, scope: TaskScope, batches: Iterator[pa.RecordBatch]) -> int:
        rows = [row for batch in batches for row in batch.to_pylist()]
        self.path.mkdir(parents=True, exist_ok=True)
        lines = "".join(f"{json.dumps(row)}\n" for row in rows)
        (self.path / f"{uuid.uuid4().hex}.jsonl").write_text(lines, encoding="utf-8")
        return len(rows)


class AppendingDataSource(FiresteelDataSource):
    """``firesteel.appending``: option ``path``."""

    connector: ClassVar[str] = "appending"

    def create_sink(self, schema: StructType) -> tuple[Sink, Guarantee | None]:
        return AppendingSink(str(self.options["path"])), None


def _case(tmp_path: Path, claims: Guarantee) -> SinkCase:
    out = tmp_path / "out"
    readme = tmp_path / "README.md"
    readme.write_text(
        "| feature | guarantee it gives |\n|---|---|\n| Appending sink | at-least-once |\n",
        encoding="utf-8",
    )

    def rows(seqs: Sequence[int]) -> pa.RecordBatch:
        return pa.record_batch({"seq": pa.array(list(seqs), pa.int64())})

    def read() -> list[int]:
        return [json.loads(line)["seq"] for p in out.glob("*.jsonl") for line in p.open()]

    return SinkCase(
        claims=claims,
        connector=AppendingDataSource,
        options={"path": str(out)},
        schema=StructType([StructField("seq", LongType())]),
        rows=rows,
        read=read,
        readme=readme,
        readme_row="Appending sink",
    )


CASES = [name for name in dir(SinkSuite) if name.startswith("test_")]


@pytest.mark.parametrize("case", CASES)
def test_a_sink_that_keeps_its_claim_passes_every_case(tmp_path: Path, case: str) -> None:
    getattr(SinkSuite(), case)(_case(tmp_path, Guarantee.AT_LEAST_ONCE))


@pytest.mark.parametrize(
    "case",
    [
        "test_the_declared_guarantee_is_the_claimed_one_and_the_readmes",
        "test_a_batch_run_again_after_its_commit_is_not_duplicated",
        "test_an_aborted_batch_run_again_is_complete",
    ],
)
def test_a_sink_claiming_more_than_it_gives_fails(tmp_path: Path, case: str) -> None:
    with pytest.raises(AssertionError):
        getattr(SinkSuite(), case)(_case(tmp_path, Guarantee.EXACTLY_ONCE))


class ForgetfulCommitter(FileCheckpointCommitter):
    """Records sends and never finds them again: every re-run of a batch sends it again."""

    def is_committed(self, sink_id: str, batch_id: int, partition_id: int) -> bool:
        return False


class UpsertWalDataSource(FiresteelDataSource):
    """``firesteel.upsert-wal``: the SQLite upsert target at ``target``, its log and markers
    under ``log``; ``forgetful`` loses the markers."""

    connector: ClassVar[str] = "upsert-wal"

    def create_sink(self, schema: StructType) -> tuple[Sink, Guarantee | None]:
        log = self.options["log"]
        kind = ForgetfulCommitter if self.options.get("forgetful") else FileCheckpointCommitter
        sink = SqliteUpsertWalSink(
            "wal", f"{log}/wal", kind(f"{log}/commits"), self.options["target"]
        )
        return sink, None


def _upsert_wal_case(tmp_path: Path, *, forgetful: bool, counted: bool) -> SinkCase:
    tmp_path.mkdir(exist_ok=True)
    target = str(tmp_path / "target.sqlite")
    readme = tmp_path / "README.md"
    readme.write_text(
        "| feature | guarantee it gives |\n|---|---|\n| Upsert WAL | exactly-once |\n",
        encoding="utf-8",
    )

    def rows(seqs: Sequence[int]) -> pa.RecordBatch:
        return pa.record_batch({"seq": pa.array(list(seqs), pa.int64())})

    def read() -> list[int]:
        return read_sqlite(target) if Path(target).exists() else []

    def writes() -> Counter[int]:
        return Counter(w.seq for w in read_writes(target)) if Path(target).exists() else Counter()

    options = {"target": target, "log": str(tmp_path / "log")}
    return SinkCase(
        claims=Guarantee.EXACTLY_ONCE,
        connector=UpsertWalDataSource,
        options={**options, "forgetful": "yes"} if forgetful else options,
        schema=StructType([StructField("seq", LongType())]),
        rows=rows,
        read=read,
        readme=readme,
        readme_row="Upsert WAL",
        writes=writes if counted else None,
    )


@pytest.mark.parametrize("case", CASES)
def test_an_upsert_wal_sink_passes_every_case_counted_by_its_target(
    tmp_path: Path, case: str
) -> None:
    getattr(SinkSuite(), case)(_upsert_wal_case(tmp_path, forgetful=False, counted=True))


def test_a_resend_an_upsert_absorbs_fails_only_where_the_target_counts_writes(
    tmp_path: Path,
) -> None:
    case = "test_a_batch_run_again_after_its_commit_is_not_duplicated"
    uncounted = _upsert_wal_case(tmp_path / "uncounted", forgetful=True, counted=False)
    getattr(SinkSuite(), case)(uncounted)  # the table alone cannot tell
    counted = _upsert_wal_case(tmp_path / "counted", forgetful=True, counted=True)
    with pytest.raises(AssertionError, match="records written more than once"):
        getattr(SinkSuite(), case)(counted)
