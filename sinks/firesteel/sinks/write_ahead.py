"""The write-ahead-log sink (Flink's GenericWriteAheadSink) for micro-batches.

Commit order, per micro-batch N:

1. Executors (:meth:`WriteAheadSink.write_partition`): each task appends its
   partition's record batches to a log segment in checkpoint storage,
   ``<log_dir>/<sink>/<N>/part-<p>-<token>.arrow`` (an Arrow IPC file written
   durably, :mod:`firesteel.core.durable`), under a name unique to the
   attempt, so no attempt ever replaces a segment another one voted for. The
   vote names the segment, its row count and its SHA-256.
2. Driver (:meth:`WriteAheadSink.commit_batch`), once every task voted:
   a. the first commit of N writes the batch's *plan*
      (``<log_dir>/<sink>/plans/<N>.json``: its partition count and every
      voted segment, and the batch's *write stamp*, :meth:`WriteAheadSink.write_stamp`);
      a re-run of N (after a crash before Spark recorded
      ``commits/N``) with the same partition count uses its own fresh segments
      (same partitioning, same rows per partition), and one with another
      partition count (a changed ``spark.sql.shuffle.partitions`` or operator
      parallelism) rolls the plan's segments forward and ignores its own, so
      the commit records, keyed by partition, can neither skip rows nor
      re-send them;
   b. for each segment of the plan in partition order: skip it if the
      :class:`~firesteel.sinks.committers.CheckpointCommitter` says
      (sink, N, partition) is committed; otherwise read it, verify its checksum
      and format version, hand its records to :meth:`WriteAheadSink.send_values`,
      then record it with the committer. With ``send_connect`` (a Spark Connect
      URL of the job's own driver) the segments still to send are sent and
      recorded by one Spark task each, in parallel across the executors
      (:mod:`firesteel.sinks.fanout`); otherwise one after another, here.
3. Delete the segments of batch N and of every earlier batch, the plans
   before N, and let the committer forget batches before N (the plan of N
   stays until N + 1 commits: Spark may still re-run N).
4. Spark writes ``commits/N``.

A crash between 2b's send and its commit record re-sends that one segment
after the restart: with a plain (appending) target this is at-least-once; a
target that upserts (declare ``upsert_target = True``) turns the re-send into
an overwrite, hence exactly-once; a transactional target (declare
``transactional_target = True``: Kafka) commits each segment together with its
own record of the send and skips a segment that record covers, so the re-send
sends nothing. Segments already recorded are never re-sent. Such a target's
record is the proof of the send, so it may do without a committer
(``committer=None``): every commit then hands each planned segment to
:meth:`WriteAheadSink.send_values`, which skips the ones its record covers.

On an object store (``log_dir`` ``s3a://bucket/wal``, settings in
``storage_options``, see :mod:`firesteel.core.storage`) nothing here needs a
rename: a segment and a plan are each one object under a name no other
attempt writes, uploaded whole (a killed upload leaves no object; a
half-uploaded segment was never voted for), and a task's vote carries the
segment's size and SHA-256, which the driver checks before sending. Nothing
is found by listing what was ever written: the plan of N and of N - 1 (for the
write stamp) are read by name; only the cleanup of step 3 lists, and only the
sink's folder, which holds the batches not yet cleaned (one, normally). The
requests per batch are therefore flat however many batches ran
(``benchmarks/requests.py`` counts them at the server).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
import uuid
from abc import abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa
from pyarrow import fs

from firesteel.core.faults import (
    AFTER_COMMIT,
    AFTER_PRE_COMMIT,
    AFTER_WRITE,
    BEFORE_COMMIT,
    MID_COMMIT,
    fault_point,
)
from firesteel.core.hashing import HashingWriter
from firesteel.core.phases import commit_metrics
from firesteel.core.spi import (
    CheckpointCorruptError,
    Committable,
    IncompatibleFormatError,
    Sink,
    SinkError,
    SinkKind,
    TaskScope,
    Vote,
)
from firesteel.core.toolkit import (
    Folder,
    StorageConfig,
    check_location,
    read_record,
    resolve,
    timed,
    write_record,
)
from firesteel.sinks.committers import CheckpointCommitter
from firesteel.sinks.fanout import run_on_executors

logger = logging.getLogger(__name__)

SEGMENT_FORMAT_VERSION = 1
"""Version of the log segment layout; readers refuse newer versions."""

PLAN_KIND = "write-ahead-plan"
PLAN_FORMAT_VERSION = 3
"""Version of a batch plan (``plans/<N>.json``, a :mod:`firesteel.core.durable` record
since version 3); readers refuse other versions."""

_HASH_CHUNK = 1 << 20
SMALL_SEGMENT = 8 << 20
"""Segments up to this size (bytes) are read whole, once; larger ones are streamed."""
_META_VERSION = b"firesteel.wal.version"
_META_KEY = b"firesteel.wal.key"

AFTER_SEND = fault_point(
    "wal.after_send", "a segment was sent, before the committer recorded it (the re-send window)"
)


@dataclass(frozen=True)
class SegmentCommittable(Committable):
    """A task's vote: its log segment (``None`` for an empty partition), size and checksum."""

    FORMAT_VERSION: ClassVar[int] = SEGMENT_FORMAT_VERSION

    segment: str | None
    rows: int = 0
    bytes: int = 0
    sha256: str = ""


class WriteAheadSink(Sink):
    """Logs each partition durably, sends it to the target once its batch commits.

    Subclasses implement :meth:`send_values`. Set ``upsert_target = True`` on a
    subclass whose target overwrites by key, so that re-sending a segment
    cannot duplicate: its kind becomes
    :attr:`~firesteel.core.guarantee.SinkKind.WRITE_AHEAD_LOG_UPSERT` and the
    guarantee check grants exactly-once. Set ``transactional_target = True``
    when :meth:`send_values` commits a segment in one transaction of the target
    together with a record of its own that it checks first (the plan is then a
    two-phase commit's pre-committed state, and the sink's kind
    :attr:`~firesteel.core.guarantee.SinkKind.TWO_PHASE_COMMIT`).

    ``committer`` records each sent segment; ``None`` only for a ``transactional_target``,
    whose own record in the target says which segments were sent (a re-run then asks
    the target, through :meth:`send_values`, rather than a second record).
    ``log_dir`` (local path or pyarrow filesystem URI) should live in the
    query's checkpoint storage, e.g. ``<checkpoint>/firesteel/wal``: executors
    write segments there and the driver reads them, so it must be reachable
    from both. ``send_connect``, a Spark Connect URL of the job's own driver,
    moves the sends onto the executors (:mod:`firesteel.sinks.fanout`).
    ``storage_options``: how to reach the store of ``log_dir`` when it is an
    object store, by Hadoop's setting names (``fs.s3a.endpoint``, ...; see
    :mod:`firesteel.core.storage`). See the module docs for the commit order.
    """

    kind: ClassVar[SinkKind] = SinkKind.WRITE_AHEAD_LOG
    upsert_target: ClassVar[bool] = False
    """True when :meth:`send_values` overwrites by key (re-sending is harmless)."""
    transactional_target: ClassVar[bool] = False
    """True when :meth:`send_values` commits a segment and its own record of it in one
    transaction of the target, and sends nothing for a segment that record covers."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.transactional_target:
            cls.kind = SinkKind.TWO_PHASE_COMMIT
        elif cls.upsert_target:
            cls.kind = SinkKind.WRITE_AHEAD_LOG_UPSERT
        else:
            cls.kind = SinkKind.WRITE_AHEAD_LOG

    def __init__(
        self,
        sink_id: str,
        log_dir: str,
        committer: CheckpointCommitter | None,
        send_connect: str | None = None,
        storage_options: StorageConfig | Mapping[str, str] | None = None,
    ) -> None:
        if not sink_id or "/" in sink_id:
            msg = f"{self.name}: sink id {sink_id!r} must be non-empty and contain no '/'"
            raise SinkError(msg)
        if committer is None and not self.transactional_target:
            msg = (
                f"{self.name}: sink {sink_id!r} needs a checkpoint committer: only a "
                "transactional target records its own sends"
            )
            raise SinkError(msg)
        self.sink_id = sink_id
        self.log_dir = log_dir.rstrip("/")
        self.committer = committer
        self.send_connect = send_connect
        self.storage = StorageConfig.given(storage_options)
        self._stamps: dict[int, int] = {}

    @abstractmethod
    def send_values(self, batches: Iterable[pa.RecordBatch], batch_id: int, partition: int) -> None:
        """Driver side: deliver one segment's records to the target.

        ``batches`` streams the segment from checkpoint storage (iterate it once).

        Return only once the target acknowledged every record; raise to fail
        the batch (nothing is recorded, Spark re-runs the batch, and the
        segment is sent again). May be called again for a segment whose
        earlier send was interrupted by a crash: an appending target then
        receives it twice, an upsert target overwrites.
        """

    def write_stamp(self, batch_id: int) -> int:
        """Batch ``batch_id``'s write timestamp, µs since the epoch, for :meth:`send_values`.

        Fixed by the batch's first commit and kept in its plan, so a re-send
        after a crash carries the same stamp whatever the clock says then; and
        strictly greater than every earlier batch's stamp, so a clock set back
        between batches (or between a crash and the restart) cannot make a
        target that orders writes by timestamp (Cassandra's ``USING
        TIMESTAMP``) keep an older batch's value over a newer one's.
        """
        if batch_id not in self._stamps:
            msg = f"{self.sink_id}: batch {batch_id} has no plan yet; only commit_batch sends"
            raise SinkError(msg)
        return self._stamps[batch_id]

    def prepare(self) -> None:
        """Check that the log's store answers (naming a missing bucket, refused
        credentials, an unreachable endpoint), create its folder, open the committer."""
        check_location(resolve(self.log_dir, self.storage), self.storage)
        self.log_folder.make()
        if self.committer is not None:
            self.committer.open()

    @functools.cached_property
    def log_folder(self) -> Folder:
        """This sink's folder of the log: ``<log_dir>/<sink id>``."""
        return Folder(f"{self.log_dir}/{self.sink_id}", self.storage)

    def _segment_key(self, batch_id: int, partition_id: int, token: str) -> str:
        return f"{batch_id}/part-{partition_id:05d}-{token}.arrow"

    def segment_path(self, batch_id: int, partition_id: int, token: str) -> str:
        """Where one attempt's segment of (this sink, batch, partition) lives (a path or URI)."""
        return self.log_folder.uri_of(self._segment_key(batch_id, partition_id, token))

    def plan_path(self, batch_id: int) -> str:
        """Where the plan of batch ``batch_id`` lives (a path or URI)."""
        return self.log_folder.uri_of(f"plans/{batch_id}.json")

    def write_partition(self, scope: TaskScope, batches: Iterator[pa.RecordBatch]) -> Vote:
        iterator = iter(batches)
        first = next(iterator, None)
        if first is None:
            AFTER_WRITE.fire(scope.batch_id, scope.partition_id)
            return self.vote(scope, 0, SegmentCommittable(None))
        segment = self._segment_key(scope.batch_id, scope.partition_id, uuid.uuid4().hex)
        path = self.log_folder.uri_of(segment)
        key = f"{self.sink_id}/{scope.batch_id}/{scope.partition_id}"
        schema = first.schema.with_metadata(
            {
                **(first.schema.metadata or {}),
                _META_VERSION: str(SEGMENT_FORMAT_VERSION).encode(),
                _META_KEY: key.encode(),
            }
        )
        rows = 0
        with self.log_folder.output(segment) as out:
            hashing = HashingWriter(out)
            with pa.ipc.new_file(pa.PythonFile(hashing, mode="w"), schema) as writer:
                for batch in _chain(first, iterator):
                    writer.write_batch(batch)
                    rows += batch.num_rows
        AFTER_WRITE.fire(scope.batch_id, scope.partition_id)
        payload = SegmentCommittable(path, rows, hashing.size, hashing.digest.hexdigest())
        vote = self.vote(scope, rows, payload)
        AFTER_PRE_COMMIT.fire(scope.batch_id, scope.partition_id)
        return vote

    def read_segment(self, vote: Vote) -> Iterator[pa.RecordBatch]:
        """The records of a voted segment, streamed, after checking its checksum and format.

        The whole file is hashed before the first record is yielded (nothing
        unverified reaches the target). A segment of up to
        :data:`SMALL_SEGMENT` bytes is read once, into memory, and parsed from
        there (on an object store: one GET instead of one per IPC structure);
        a larger one is hashed in chunks and then read one record batch at a
        time, so memory stays bounded by a batch, not a segment. Raises
        :class:`~firesteel.core.errors.CheckpointCorruptError` naming the file
        when it is missing, truncated or altered, and
        :class:`~firesteel.core.errors.IncompatibleFormatError` when a newer
        release wrote it.
        """
        where = f"{self.sink_id} batch {vote.batch_id} partition {vote.partition_id}"
        payload = vote.committable(SegmentCommittable)
        path = str(payload.segment)
        location = resolve(path, self.storage)
        fsys, local = location.filesystem, location.path
        whole = self._read_whole(fsys, local, vote) if payload.bytes <= SMALL_SEGMENT else None
        if whole is not None:
            size, digest = whole.size, hashlib.sha256(whole).hexdigest()
        else:
            size, digest = self._digest(fsys, local, vote)
        if digest != payload.sha256 or size != payload.bytes:
            msg = (
                f"{path}: write-ahead-log segment checksum mismatch ({size} bytes, "
                f"sha256 {digest}; the task voted {payload.bytes} bytes, sha256 "
                f"{payload.sha256}): the file was truncated or altered"
            )
            raise CheckpointCorruptError(msg)
        with pa.BufferReader(whole) if whole is not None else fsys.open_input_file(local) as source:
            reader = pa.ipc.open_file(source)
            stored = (reader.schema.metadata or {}).get(_META_VERSION, b"0")
            if int(stored) > SEGMENT_FORMAT_VERSION:
                msg = f"{path}: segment format {int(stored)} is newer than this release reads"
                raise IncompatibleFormatError(msg)
            logger.debug("%s: streaming segment %s", where, path)
            for index in range(reader.num_record_batches):
                yield reader.get_batch(index)

    def _read_whole(self, fsys: fs.FileSystem, local: str, vote: Vote) -> pa.Buffer:
        """A small segment's bytes, in one read."""
        try:
            with fsys.open_input_stream(local) as stream:
                return stream.read_buffer()
        except FileNotFoundError as exc:
            raise self._missing(local, vote) from exc

    def _digest(self, fsys: fs.FileSystem, local: str, vote: Vote) -> tuple[int, str]:
        """Size and SHA-256 of a segment, read in chunks."""
        digest = hashlib.sha256()
        size = 0
        try:
            with fsys.open_input_stream(local) as stream:
                while chunk := stream.read(_HASH_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
        except FileNotFoundError as exc:
            raise self._missing(local, vote) from exc
        return size, digest.hexdigest()

    def _missing(self, local: str, vote: Vote) -> CheckpointCorruptError:
        msg = (
            f"{local}: write-ahead-log segment of {self.sink_id} batch {vote.batch_id} "
            f"partition {vote.partition_id} is missing, although its task voted and it "
            "is not recorded as sent; the checkpoint storage lost it"
        )
        return CheckpointCorruptError(msg)

    def commit_batch(self, batch_id: int, votes: Sequence[Vote]) -> None:
        """Plan, send each unsent segment and record it, clean up; each part timed as a
        phase of the commit (``plan``, ``send``, ``record``, ``cleanup``:
        :mod:`firesteel.core.metrics.commit`), ``segments_pending`` counting the segments
        this commit found unsent (after a crash, fewer than the batch wrote)."""
        BEFORE_COMMIT.fire(batch_id)
        with timed("wal.plan", phase="plan"):
            pending = [vote for vote in self._plan(batch_id, votes) if self._unsent(vote)]
        commit_metrics().count("segments_pending", len(pending))
        if self.send_connect and pending:
            sends = [_SegmentSend(self, vote) for vote in pending]
            with timed("wal.send_tasks", phase="send"):
                run_on_executors(self.send_connect, sends, f"{self.sink_id} batch {batch_id}")
        else:
            for position, vote in enumerate(pending):
                self.send_segment(vote)
                if position < len(pending) - 1:
                    MID_COMMIT.fire(batch_id)
        with timed("wal.cleanup", phase="cleanup"):
            self._delete_through(batch_id)
            if self.committer is not None:
                self.committer.forget(self.sink_id, batch_id)
        AFTER_COMMIT.fire(batch_id)

    def _unsent(self, vote: Vote) -> bool:
        """Whether ``vote`` has a segment the committer (if any) does not record as sent."""
        if vote.committable(SegmentCommittable).segment is None:
            return False
        if self.committer is not None and self.committer.is_committed(
            self.sink_id, vote.batch_id, vote.partition_id
        ):
            logger.info(
                "%s: batch %d partition %d already sent; skipping its segment",
                self.sink_id,
                vote.batch_id,
                vote.partition_id,
            )
            return False
        return True

    def send_segment(self, vote: Vote) -> None:
        """Send one voted segment, then record it: where it runs, the driver or an executor."""
        with timed("wal.send", phase="send"):
            self.send_values(self.read_segment(vote), vote.batch_id, vote.partition_id)
        AFTER_SEND.fire(vote.batch_id, vote.partition_id)
        if self.committer is None:
            return
        with timed("wal.marker", phase="record"):
            self.committer.commit(self.sink_id, vote.batch_id, vote.partition_id)

    def _plan(self, batch_id: int, votes: Sequence[Vote]) -> list[Vote]:
        """The votes batch ``batch_id`` commits: its first commit's, recorded durably."""
        where = self.plan_path(batch_id)
        try:
            body = read_record(where, PLAN_KIND, (PLAN_FORMAT_VERSION,), config=self.storage)
        except FileNotFoundError:
            body = None
        if body is None:
            ordered = sorted(votes, key=lambda vote: vote.partition_id)
            stamp = max(time.time_ns() // 1000, self._previous_stamp(batch_id) + 1)
            self._stamps = {batch_id: stamp}
            body = {
                "sink": self.sink_id,
                "batch": batch_id,
                "stamp": stamp,
                "partitions": len(ordered),
                "segments": [
                    {"partition": v.partition_id, **v.committable(SegmentCommittable).to_json()}
                    for v in ordered
                ],
            }
            write_record(where, PLAN_KIND, PLAN_FORMAT_VERSION, body, config=self.storage)
            return ordered
        if body.get("batch") != batch_id:
            msg = f"{where}: a plan of batch {body.get('batch')}, not of batch {batch_id}"
            raise CheckpointCorruptError(msg)
        self._stamps = {batch_id: int(body["stamp"])}
        if body["partitions"] == len(votes):
            # Same partitioning, same rows per partition: this attempt's fresh segments
            # serve as well, and they replace a planned segment that storage lost.
            return sorted(votes, key=lambda vote: vote.partition_id)
        logger.warning(
            "%s: batch %d re-runs with %d partitions but first committed with %d; "
            "rolling its first commit forward and discarding this attempt's segments",
            self.sink_id,
            batch_id,
            len(votes),
            body["partitions"],
        )
        return [
            Vote(
                sink_id=self.sink_id,
                batch_id=batch_id,
                partition_id=int(entry["partition"]),
                attempt=0,
                rows=int(entry.get("rows", 0)),
                payload=SegmentCommittable.from_json(entry, self.plan_path(batch_id)),
            )
            for entry in body["segments"]
        ]

    def _previous_stamp(self, batch_id: int) -> int:
        """The highest stamp of the plans kept for batches before ``batch_id`` (0 if none).

        Spark numbers batches one after another and the plan of N - 1 stays until
        N commits, so that plan, read by name, is the newest; the plans folder is
        listed only when it is missing (the sink's first batch, or a log folder
        that was emptied).
        """
        try:
            return self._stamp_of(self.plan_path(batch_id - 1))
        except FileNotFoundError:
            pass
        stamp = 0
        for name in self.log_folder.names("plans"):
            number = name.removesuffix(".json")
            if number.isdigit() and int(number) < batch_id:
                stamp = max(stamp, self._stamp_of(self.plan_path(int(number))))
        return stamp

    def _stamp_of(self, plan: str) -> int:
        body = read_record(plan, PLAN_KIND, (PLAN_FORMAT_VERSION,), config=self.storage)
        try:
            return int(body["stamp"])
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"{plan}: write-ahead-log plan has no valid stamp ({exc})"
            raise CheckpointCorruptError(msg) from exc

    def abort_batch(self, batch_id: int, votes: Sequence[Vote | None]) -> None:
        # Nothing was sent: the segments are simply replaced when the batch re-runs.
        logger.warning(
            "%s: batch %d failed; its log segments will be rewritten", self.name, batch_id
        )

    def _delete_through(self, batch_id: int) -> None:
        """Delete the segments of ``batch_id`` and older batches, and the plans before it."""
        log = self.log_folder
        for info in log.entries():
            if (
                info.type == fs.FileType.Directory
                and info.base_name.isdigit()
                and int(info.base_name) <= batch_id
            ):
                log.delete_folder(info.base_name)
        for name in log.names("plans"):
            number = name.removesuffix(".json")
            if number.isdigit() and int(number) < batch_id:
                log.delete(f"plans/{name}")


@dataclass(frozen=True)
class _SegmentSend:
    """One segment's send as a picklable task for :func:`run_on_executors`."""

    sink: WriteAheadSink
    vote: Vote

    def __call__(self) -> None:
        self.sink.send_segment(self.vote)


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest
