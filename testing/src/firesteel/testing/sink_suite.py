"""The sink conformance suite: one set of cases every sink runs for each guarantee it claims.

Like Flink's ``SinkTestSuiteBase`` and firesteel's backend conformance suite
(``tests/test_state_backends.py``): a sink's test package subclasses
:class:`SinkSuite` as ``Test...`` and defines the fixture ``sink_case``,
parametrized by the guarantees the sink claims, returning a :class:`SinkCase`.
Each case builds the sink the way Spark does (the connector's data source from
flat string options, :meth:`~firesteel.core.spark.datasource.FiresteelDataSource.create_sink`),
drives the checkpoint-commit protocol directly (tasks on the test's thread, the
driver's commit after them, as the backend suite drives stores) against the
real target, and reads the output back with a reader that is not the sink's.
Where the target can count the writes it executed per record (the CQL test
server's tally, a log of writes beside an upsert table), the case passes that
count too, so a re-send an upsert absorbs is seen.

The cases, per claimed guarantee:

* the guarantee the sink declares (its kind, with a resettable source) is the
  one claimed, and the one the README's table gives;
* a batch written once appears once;
* a batch run again after its commit (same batch id, a new driver half, as
  Spark does on restart) is not duplicated for exactly-once, and loses nothing
  for at-least-once;
* where the target counts its writes: under an exactly-once claim every record
  was written exactly once, except by an idempotent sink, whose exactly-once is
  in the target's state (a replay writes again: Table 8-1's temporary
  inconsistency). A write-ahead log re-sends only after a crash between a send
  and its record, which no case has, and a two-phase commit never;
* a task attempt that fails half-way leaves nothing visible for sinks that
  write invisibly (two-phase commit, write-ahead log); the retried attempt then
  makes the batch exact;
* an aborted batch, run again, is exact (exactly-once) or complete (at-least-once);
* empty batches (a task with no record batch, a task with an empty one) commit
  and show nothing.

Data is tiny (a few rows per task) and every case reuses the session's
fixtures (broker, CQL server): the whole suite over all sinks should cost well
under a minute.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.types import StructType

from firesteel.core.context import TaskScope
from firesteel.core.guarantee import Guarantee, Replay, SinkKind, end_to_end
from firesteel.core.sink import Sink, Vote
from firesteel.core.spark.datasource import FiresteelDataSource

INVISIBLE_UNTIL_COMMIT = frozenset(
    {SinkKind.TWO_PHASE_COMMIT, SinkKind.WRITE_AHEAD_LOG, SinkKind.WRITE_AHEAD_LOG_UPSERT}
)
"""Sink kinds whose tasks write nothing a reader can see (an idempotent sink may show a
failed attempt's rows until the retry overwrites them: its temporary inconsistency)."""


class TaskKilled(RuntimeError):
    """Raised inside a task's input, as a task that dies half-way."""


@dataclass
class SinkCase:
    """One sink under one claimed guarantee, with its target and a reader of it."""

    claims: Guarantee
    """The guarantee this parametrization claims (with a resettable source)."""
    connector: type[FiresteelDataSource]
    """The Spark data source users name in ``format(...)``."""
    options: dict[str, str]
    """``writeStream`` options, as users write them."""
    schema: StructType
    """The Spark schema of the rows."""
    rows: Callable[[Sequence[int]], pa.RecordBatch]
    """Rows carrying the sequence numbers ``seqs`` (one task's input)."""
    read: Callable[[], list[int]]
    """The sequence numbers a reader of the target sees now, by a reader not the sink's."""
    readme: Path
    """The README whose table states the sink's guarantees."""
    readme_row: str
    """Text that only the sink's row of that table starts with (its first cell)."""
    writes: Callable[[], Counter[int]] | None = None
    """How many writes of each sequence number the target executed, counted by the target;
    None where the target cannot count them (then what ``read`` shows is all there is)."""
    query_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    """Spark's query id for every batch of the case."""
    kind: SinkKind | None = field(default=None, init=False)
    """The sink's kind, once :meth:`sink` built one."""

    def sink(self) -> Sink:
        """A new driver half, built and prepared as Spark does for each batch."""
        options = CaseInsensitiveDict(self.options)
        sink, _required = self.connector(options).create_sink(self.schema)
        sink.prepare()
        self.kind = sink.kind
        return sink

    def write(
        self,
        sink: Sink,
        batch_id: int,
        partition: int,
        seqs: Sequence[int],
        *,
        attempt: int = 0,
        killed: bool = False,
    ) -> Vote:
        """Run one write task; ``killed`` dies after handing over the first row."""
        scope = TaskScope(self.query_id, batch_id, partition, attempt)
        return sink.write_partition(scope, self._input(seqs, killed))

    def _input(self, seqs: Sequence[int], killed: bool) -> Iterator[pa.RecordBatch]:
        if killed:
            yield self.rows(seqs[:1])
            raise TaskKilled
        if seqs:
            yield self.rows(seqs)

    def run_batch(self, sink: Sink, batch_id: int, parts: Sequence[Sequence[int]]) -> None:
        """Every task of one batch, then the driver's commit."""
        votes = [self.write(sink, batch_id, p, seqs) for p, seqs in enumerate(parts)]
        sink.commit_batch(batch_id, votes)

    def check(self, expected: Sequence[int]) -> None:
        """The target shows ``expected``: exactly once each, or (at-least-once) at least once;
        and, where it counts its writes, wrote each once (exactly-once, not idempotent)."""
        seen = self.read()
        if self.claims is Guarantee.EXACTLY_ONCE:
            assert sorted(seen) == sorted(expected)
        else:
            counts = Counter(seen)
            assert set(counts) == set(expected), (sorted(counts), sorted(expected))
        if self.writes is None:
            return
        written = self.writes()
        assert set(written) == set(expected), (sorted(written), sorted(expected))
        if self.claims is Guarantee.EXACTLY_ONCE and self.kind is not SinkKind.IDEMPOTENT:
            again = {seq: times for seq, times in written.items() if times > 1}
            assert not again, f"records written more than once (record: writes): {again}"


def readme_guarantees(readme: Path, row: str) -> str:
    """The "guarantee" cell of the table row of ``readme`` whose first cell starts with ``row``."""
    header: list[str] = []
    for line in readme.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            header = []
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not header:
            header = [cell.lower() for cell in cells]
            continue
        if cells[0].startswith(row):
            column = next(i for i, name in enumerate(header) if "guarantee" in name)
            return cells[column]
    msg = f"{readme}: no table row starts with {row!r}"
    raise AssertionError(msg)


BATCH = [[0, 1, 2], [3, 4]]
"""One batch of two tasks."""


class SinkSuite:
    """The cases; subclass as ``Test<Sink>Conformance`` and define the fixture ``sink_case``."""

    def test_the_declared_guarantee_is_the_claimed_one_and_the_readmes(
        self, sink_case: SinkCase
    ) -> None:
        sink = sink_case.sink()
        assert end_to_end(Replay.RESETTABLE, sink.kind) is sink_case.claims
        stated = readme_guarantees(sink_case.readme, sink_case.readme_row)
        assert sink_case.claims.label in stated, stated

    def test_a_batch_written_once_appears_once(self, sink_case: SinkCase) -> None:
        sink_case.run_batch(sink_case.sink(), 0, BATCH)
        sink_case.check(range(5))

    def test_a_batch_run_again_after_its_commit_is_not_duplicated(
        self, sink_case: SinkCase
    ) -> None:
        sink_case.run_batch(sink_case.sink(), 0, BATCH)
        sink_case.run_batch(sink_case.sink(), 0, BATCH)  # Spark's restart: same id, same input
        sink_case.run_batch(sink_case.sink(), 1, [[5], [6]])
        sink_case.check(range(7))

    def test_a_failed_task_attempt_leaves_nothing_visible(self, sink_case: SinkCase) -> None:
        sink = sink_case.sink()
        with pytest.raises(TaskKilled):
            sink_case.write(sink, 0, 0, BATCH[0], attempt=0, killed=True)
        if sink.kind in INVISIBLE_UNTIL_COMMIT:
            assert sink_case.read() == []
        votes = [
            sink_case.write(sink, 0, 0, BATCH[0], attempt=1),
            sink_case.write(sink, 0, 1, BATCH[1]),
        ]
        sink.commit_batch(0, votes)
        sink_case.check(range(5))

    def test_an_aborted_batch_run_again_is_complete(self, sink_case: SinkCase) -> None:
        sink = sink_case.sink()
        vote = sink_case.write(sink, 0, 0, BATCH[0])
        with pytest.raises(TaskKilled):
            sink_case.write(sink, 0, 1, BATCH[1], killed=True)
        sink.abort_batch(0, [vote, None])
        sink_case.run_batch(sink_case.sink(), 0, BATCH)
        sink_case.check(range(5))

    def test_empty_batches_commit_and_show_nothing(self, sink_case: SinkCase) -> None:
        sink = sink_case.sink()
        votes = [
            sink_case.write(sink, 0, 0, []),
            sink.write_partition(
                TaskScope(sink_case.query_id, 0, 1, 0), iter([sink_case.rows([])])
            ),
        ]
        sink.commit_batch(0, votes)
        assert sink_case.read() == []
        sink_case.run_batch(sink_case.sink(), 1, [[0], []])
        sink_case.check([0])
