"""The sink roles of the checkpoint-commit protocol.

Every sink runs in two places. On executors, :meth:`Sink.write_partition`
consumes one partition of micro-batch N and returns a :class:`Vote`. On the
driver, once every task voted, :meth:`Sink.commit_batch` makes batch N final;
Spark writes ``commits/N`` only after it returns. A crash anywhere re-runs
batch N with the same input, so ``commit_batch`` may see N twice and must treat
the second time as a no-op, and the re-run's tasks must neither duplicate nor
resurrect what an earlier attempt wrote.

The subclasses are the columns of Table 8-1: :class:`PlainSink`,
:class:`IdempotentSink`, :class:`~firesteel.sinks.write_ahead.WriteAheadSink`
and :class:`TwoPhaseCommitSink`, which splits as Flink's Sink V2 does into a
:class:`SinkWriter` (executors: prepare typed committables) and a
:class:`Committer` (driver: commit them idempotently); :class:`InTaskCommitSink`
is the two-phase sink whose writer commits in the task.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar, cast

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from firesteel.core.context import TaskScope
from firesteel.core.errors import IncompatibleFormatError, SinkError
from firesteel.core.faults import (
    AFTER_COMMIT,
    AFTER_PRE_COMMIT,
    AFTER_WRITE,
    BEFORE_COMMIT,
)
from firesteel.core.guarantee import SinkKind
from firesteel.core.logs import timed

logger = logging.getLogger(__name__)

VOTE_FORMAT_VERSION = 1

C = TypeVar("C", bound="Committable")


@dataclass(frozen=True)
class Committable:
    """A sink's typed vote payload, Flink Sink V2's committable.

    Each sink subclasses it as a frozen dataclass of plain fields (a
    transaction handle, a log segment), so the driver half reads attributes a
    type checker knows instead of dictionary keys. ``version`` is set from the
    subclass's :attr:`FORMAT_VERSION`; :meth:`check_version` refuses a newer
    one (executors running a newer release than the driver, or a newer
    release's record in checkpoint storage) rather than misread it.
    """

    FORMAT_VERSION: ClassVar[int] = 1
    """Bump when a field changes meaning; readers refuse newer versions."""

    version: int = field(default=0, kw_only=True)

    def __post_init__(self) -> None:
        if self.version == 0:
            object.__setattr__(self, "version", self.FORMAT_VERSION)

    def check_version(self, where: str) -> None:
        """Raise :class:`IncompatibleFormatError` if a newer release wrote this."""
        if self.version > self.FORMAT_VERSION:
            msg = (
                f"{where}: {type(self).__name__} format {self.version} is newer than this "
                f"release reads ({self.FORMAT_VERSION}); upgrade firesteel everywhere the "
                "query runs"
            )
            raise IncompatibleFormatError(msg)

    def to_json(self) -> dict[str, Any]:
        """Plain data, for sinks that store committables (e.g. a write-ahead-log plan)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls: type[C], data: dict[str, Any], where: str) -> C:
        """Rebuild a committable :meth:`to_json` produced, refusing newer versions."""
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            committable = cls(**{k: v for k, v in data.items() if k in names})
        except TypeError as exc:
            msg = f"{where}: not a {cls.__name__} ({exc})"
            raise IncompatibleFormatError(msg) from exc
        committable.check_version(where)
        return committable


@dataclass
class Vote(WriterCommitMessage):
    """What one write task tells the driver: "partition p of batch N is ready".

    ``payload`` is the sink's :class:`Committable` (``None`` for sinks whose
    driver half needs nothing but the row count); it crosses process
    boundaries pickled, so it is plain data.
    """

    sink_id: str
    batch_id: int
    partition_id: int
    attempt: int
    rows: int
    payload: Committable | None = None
    version: int = VOTE_FORMAT_VERSION
    metrics: dict[str, float] = field(default_factory=dict)
    """What the task measured (:mod:`firesteel.core.metrics.task`), summed per batch."""

    def committable(self, kind: type[C]) -> C:
        """The payload as ``kind``, version-checked; a :class:`SinkError` if it is not one."""
        payload = self.payload
        if not isinstance(payload, kind):
            msg = (
                f"{self.sink_id}: the vote of batch {self.batch_id} partition "
                f"{self.partition_id} carries {type(payload).__name__}, not {kind.__name__}"
            )
            raise SinkError(msg)
        payload.check_version(f"{self.sink_id} batch {self.batch_id}")
        return payload


class Sink(ABC):
    """Base of every sink: its identity, its kind, its two halves."""

    kind: ClassVar[SinkKind]
    """The column of Table 8-1 this sink belongs to."""

    name: ClassVar[str] = "sink"
    """The format name users know it by, e.g. ``firesteel.files``."""

    sink_id: str
    """Stable across restarts of the same query: everything durable is keyed by it."""

    def prepare(self) -> None:
        """Driver side, before the first batch: validate the target, recover leftovers.

        Called once per batch's writer on the driver (Spark builds a new one for every
        batch, in a fresh Python process), before any task of that batch runs. Raise a
        :class:`~firesteel.core.errors.ConfigError` naming the option when the target
        cannot work (path not writable, server unreachable).
        """

    @abstractmethod
    def write_partition(self, scope: TaskScope, batches: Iterator[pa.RecordBatch]) -> Vote:
        """Executor side: write one partition of one batch and vote.

        Called once per task attempt; a retried or re-run task calls it again for the
        same (batch, partition) with the same rows, so everything durable is keyed by
        ``scope``'s batch and partition, never its attempt. The vote reaches
        :meth:`commit_batch` only if every task of the batch succeeded.
        """

    @abstractmethod
    def commit_batch(self, batch_id: int, votes: Sequence[Vote]) -> None:
        """Driver side: every task voted; make batch ``batch_id`` final (idempotent).

        Called once per batch attempt, before Spark writes ``commits/N``; after a crash
        it is called again for the same batch, with the votes of the first run or of a
        re-run, and must keep what the first commit made final.
        """

    def abort_batch(self, batch_id: int, votes: Sequence[Vote | None]) -> None:
        """Driver side: a task failed; discard what the batch wrote (idempotent).

        Called by Spark when the batch's job fails, with ``None`` for tasks that sent no
        vote. Never guaranteed: a driver that dies is not told, so what it would discard
        is discarded by a later :meth:`prepare` or commit instead.
        """

    def vote(self, scope: TaskScope, rows: int, payload: Committable | None = None) -> Vote:
        """Build this sink's vote for the task ``scope``."""
        return Vote(
            sink_id=self.sink_id,
            batch_id=scope.batch_id,
            partition_id=scope.partition_id,
            attempt=scope.attempt,
            rows=rows,
            payload=payload,
        )


class PlainSink(Sink):
    """Writes at once with no deduplication: replays after a crash write again.

    With a resettable source this gives at-least-once, provided
    :meth:`write` returns only once every record is durably accepted.
    """

    kind = SinkKind.PLAIN

    @abstractmethod
    def write(self, scope: TaskScope, batches: Iterator[pa.RecordBatch]) -> int:
        """Write all batches; return the row count once the target acknowledged them."""

    def write_partition(self, scope: TaskScope, batches: Iterator[pa.RecordBatch]) -> Vote:
        rows = self.write(scope, batches)
        AFTER_WRITE.fire(scope.batch_id, scope.partition_id)
        return self.vote(scope, rows)

    def commit_batch(self, batch_id: int, votes: Sequence[Vote]) -> None:
        BEFORE_COMMIT.fire(batch_id)
        AFTER_COMMIT.fire(batch_id)


class IdempotentSink(PlainSink):
    """Writes at once with deterministic keys (upserts): a replay overwrites.

    With a resettable source this gives exactly-once, with temporary
    inconsistency while a batch replays (old values may be rewritten).
    """

    kind = SinkKind.IDEMPOTENT


Txn = TypeVar("Txn")


class SinkWriter(ABC, Generic[Txn, C]):
    """The executor half of a two-phase sink, Flink Sink V2's committing ``SinkWriter``.

    Per task: :meth:`begin_transaction`, :meth:`write` for each record batch,
    then :meth:`pre_commit` flushes durably and returns the typed
    :class:`Committable` (the task's vote). Nothing it writes is visible before
    the :class:`Committer` commits that committable. If the task fails,
    :meth:`abort_transaction` runs.
    """

    @abstractmethod
    def begin_transaction(self, scope: TaskScope) -> Txn:
        """Open the invisible transaction of one task; called first in every task attempt."""

    @abstractmethod
    def write(self, txn: Txn, batch: pa.RecordBatch) -> None:
        """Add records to the transaction; nothing becomes visible.

        Called for each record batch of the task, in order, between
        :meth:`begin_transaction` and :meth:`pre_commit`; never after either ended it.
        """

    @abstractmethod
    def pre_commit(self, txn: Txn) -> C:
        """Flush durably and return the committable the driver will commit.

        Called once, after the task's last :meth:`write`. Once it returns, the
        committable must be committable by another process (the driver), even if this
        one dies.
        """

    @abstractmethod
    def abort_transaction(self, txn: Txn) -> None:
        """Executor side: the task failed; drop what the transaction wrote.

        Called when :meth:`write` or :meth:`pre_commit` raised, in the same process.
        A task killed outright gets no call: its leftovers are the committer's to
        discard (:meth:`Committer.recover`, or a re-run's commit).
        """


class CommitOutcome(enum.Enum):
    """What a :meth:`Committer.commit` that returned did: Flink's ``CommitRequest`` outcomes.

    The vocabulary is fixed. A commit that returns reports one of these two; a
    commit that cannot finish raises instead, and the error is the outcome:

    * **retry later**: any error but a :class:`~firesteel.core.errors.SinkError`
      (an unreachable target, a timeout). Spark writes ``commits/N`` only after a
      return, so the query fails, and its restart commits batch N again, with the
      same committables or those of a re-run;
    * **failed**: a :class:`~firesteel.core.errors.SinkError` naming a cause a
      retry cannot cure (fenced by another writer, the target changed shape); the
      query fails the same way, and the message says what to fix before a restart.
    """

    COMMITTED = "committed"
    """This call made the batch's committables visible."""
    ALREADY_COMMITTED = "already-committed"
    """An earlier call committed the batch (or a re-run of it): its result was kept and
    the new committables discarded, so nothing became visible twice."""


class Committer(ABC, Generic[C]):
    """The driver half of a two-phase sink, Flink Sink V2's ``Committer``.

    :meth:`commit` runs on the driver once every task of batch N voted, before
    Spark writes ``commits/N``; it reports a :class:`CommitOutcome`, or raises
    (retry later, or failed: see there). Every call is an **idempotent
    re-commit**: after a crash :meth:`commit` may receive committables it
    already committed, or those of a re-run of a batch an earlier attempt
    committed; it must then keep the earlier result, discard the new
    committables, and return :attr:`CommitOutcome.ALREADY_COMMITTED`.
    """

    @abstractmethod
    def commit(self, batch_id: int, handles: Sequence[C]) -> CommitOutcome:
        """Make every committable of the batch visible, exactly once (idempotent).

        Called on the driver after every task voted, at least once per committed
        batch; ``handles`` are in partition order. Returning guarantees the batch is
        durably visible.
        """

    @abstractmethod
    def abort(self, batch_id: int, handles: Sequence[C]) -> None:
        """Discard the committables of a failed batch (idempotent).

        Called on the driver when the batch's job failed, with the committables of
        the tasks that voted; like :meth:`Sink.abort_batch`, never guaranteed to run.
        """

    def recover(self) -> None:
        """Finish commits a crash interrupted; discard transactions nobody will commit.

        Called by :meth:`TwoPhaseCommitSink.prepare` on the driver before a batch's
        tasks run; it must be idempotent, since every batch's writer calls it.
        """


class TwoPhaseCommitSink(Sink, SinkWriter[Txn, C], Committer[C]):
    """Flink's two-phase-commit sink for micro-batches: a :class:`SinkWriter` on the
    executors and a :class:`Committer` on the driver, joined by this protocol.

    ``committable_type`` names the committable class, so the driver checks type
    and version of what the executors sent. :meth:`Committer.recover` runs in
    :meth:`prepare` and finishes or discards what a crashed run left. A sink
    whose target commits inside the task declares so by deriving from
    :class:`InTaskCommitSink` instead.
    """

    kind = SinkKind.TWO_PHASE_COMMIT
    committable_type: ClassVar[type[Committable]]
    """The :class:`Committable` subclass :meth:`pre_commit` returns."""

    def prepare(self) -> None:
        self.recover()

    def write_partition(self, scope: TaskScope, batches: Iterator[pa.RecordBatch]) -> Vote:
        txn = self.begin_transaction(scope)
        rows = 0
        try:
            for batch in batches:
                self.write(txn, batch)
                rows += batch.num_rows
            AFTER_WRITE.fire(scope.batch_id, scope.partition_id)
            handle = self.pre_commit(txn)
        except BaseException:
            self.abort_transaction(txn)
            raise
        AFTER_PRE_COMMIT.fire(scope.batch_id, scope.partition_id)
        return self.vote(scope, rows, handle)

    def commit_batch(self, batch_id: int, votes: Sequence[Vote]) -> None:
        BEFORE_COMMIT.fire(batch_id)
        kind = cast("type[C]", self.committable_type)
        ordered = sorted(votes, key=_partition)
        with timed("sink.publish", phase="publish"):
            outcome = self.commit(batch_id, [vote.committable(kind) for vote in ordered])
        logger.debug("%s sink %s: batch %d %s", self.name, self.sink_id, batch_id, outcome.value)
        AFTER_COMMIT.fire(batch_id)

    def abort_batch(self, batch_id: int, votes: Sequence[Vote | None]) -> None:
        kind = cast("type[C]", self.committable_type)
        handles = [vote.committable(kind) for vote in votes if vote is not None]
        logger.warning(
            "%s: batch %d failed; aborting %d handles", self.name, batch_id, len(handles)
        )
        self.abort(batch_id, handles)


class InTaskCommitSink(TwoPhaseCommitSink[Txn, C]):
    """A two-phase sink whose writer commits in :meth:`~SinkWriter.pre_commit`.

    For targets that cannot commit a transaction from another process (Kafka):
    each task commits its own transaction and records, inside it, a marker that
    a re-run of the task finds before writing again. The committable then
    reports an outcome that is already **committed**; the driver's
    :meth:`commit` and :meth:`abort` only log it, and the batch's exactly-once
    rests on the writer's marker check instead of on the driver.
    """

    def commit(self, batch_id: int, handles: Sequence[C]) -> CommitOutcome:
        """Nothing to commit: every task committed its own transaction."""
        logger.info(
            "%s sink %s: batch %d committed in its %d tasks",
            self.name,
            self.sink_id,
            batch_id,
            len(handles),
        )
        return CommitOutcome.COMMITTED

    def abort(self, batch_id: int, handles: Sequence[C]) -> None:
        """Nothing to discard: a failed task aborted its own transaction."""
        logger.warning("%s sink %s: batch %d aborted", self.name, self.sink_id, batch_id)


def _partition(vote: Vote) -> int:
    return vote.partition_id
