"""The resettable Kafka source: offsets per topic-partition, kept in Spark's checkpoint.

An offset is Spark's own Kafka format, ``{"topic": {"0": 42, "1": 17}}``: the
next offset to read per partition. Offsets live in ``offsets/N`` only; a
consumer group, if configured, just mirrors committed progress for lag
monitoring.

New partitions and new topics matching ``subscribePattern`` are picked up when
a batch is planned: they join the offset at their earliest offset and are read
from the next batch on, so a batch's ranges never depend on when it is re-run.

``startingOffsets=latest`` (the default) is resolved once and never again.
Spark stores only the end of batch 0 (``offsets/0``) and asks a Python source
for its initial offset again whenever it runs batch 0, also after a crash. A
start that depends on the moment it is resolved (latest, or a timestamp or
JSON entry that falls back to latest) is therefore pinned in the query's
checkpoint (option ``checkpointLocation``, see
:mod:`firesteel.kafka.sourcefolder`) before :meth:`KafkaSource.initial_offset`
returns it, and every later run of the query starts there: records produced
after the first resolution, also while the query was down after a crash
before ``offsets/0`` was written, are all read. A run that dies before the
pin is written has handed Spark no start at all; its restart resolves one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import pyarrow as pa

from firesteel.core.faults import fault_point
from firesteel.core.spi import ConfigError, Offset, ReadLimit, ResettableSource
from firesteel.core.toolkit import timed
from firesteel.kafka.codec import ValueDecoder, schema_text
from firesteel.kafka.deadletter import TopicDeadLetter
from firesteel.kafka.discovery import Discovery, TopicPartitionKey, parse_partition_offsets
from firesteel.kafka.errors import DataLossError
from firesteel.kafka.options import KafkaSourceOptions
from firesteel.kafka.reader import OffsetRange, RangeReader, output_schema
from firesteel.kafka.sourcefolder import source_folder

logger = logging.getLogger(__name__)

AFTER_INITIAL_OFFSET = fault_point(
    "kafka.after_initial_offset", "the start offsets are known (and pinned), before offsets/0"
)

EARLIEST = -2
LATEST = -1


def to_offset(positions: dict[TopicPartitionKey, int]) -> Offset:
    """``{(topic, p): n}`` as Spark's JSON-able ``{topic: {"p": n}}``."""
    offset: dict[str, dict[str, int]] = {}
    for (topic, partition), position in sorted(positions.items()):
        offset.setdefault(topic, {})[str(partition)] = int(position)
    return offset


def from_offset(offset: Offset) -> dict[TopicPartitionKey, int]:
    """The inverse of :func:`to_offset`."""
    return {
        (topic, int(partition)): int(position)
        for topic, partitions in offset.items()
        for partition, position in partitions.items()
    }


def fair_share(
    available: dict[TopicPartitionKey, int], budget: int
) -> dict[TopicPartitionKey, int]:
    """Split ``budget`` offsets across partitions max-min fairly (water-filling).

    Every partition with data gets an equal share; shares a partition cannot
    use go to the others. Remainders go to partitions in sorted order, so the
    split is deterministic.
    """
    grant = dict.fromkeys(available, 0)
    active = sorted(tp for tp, n in available.items() if n > 0)
    while budget > 0 and active:
        share, extra = divmod(budget, len(active))
        if share == 0:
            for tp in active[:extra]:
                grant[tp] += 1
            break
        still = []
        for tp in active:
            give = min(share, available[tp] - grant[tp])
            grant[tp] += give
            budget -= give
            if grant[tp] < available[tp]:
                still.append(tp)
        active = still
    return grant


class KafkaSource(ResettableSource):
    """``spark.readStream.format("firesteel.kafka")``: see the module docs."""

    name: ClassVar[str] = "firesteel.kafka"

    def __init__(self, options: KafkaSourceOptions) -> None:
        self.options = options
        self.decoder = (
            None
            if options.value_format == "binary"
            else ValueDecoder(
                options.value_format,
                schema_text(options.value_schema, options.value_schema_file, "value.schema"),
            )
        )
        self._schema = output_schema(options.include_headers, self.decoder)
        if len(set(self._schema.names)) != len(self._schema.names):
            msg = (
                f"firesteel.kafka: option 'value.schema' has a field named like a Kafka "
                f"column ({', '.join(self._schema.names)}); rename it"
            )
            raise ConfigError(msg)
        self.folder = source_folder(options)
        self._folder_checked = False
        self._discovery: Discovery | None = None
        self._available_now: dict[TopicPartitionKey, int] | None = None
        self._initial: Offset | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors get the options, never the driver's consumer.
        state = dict(self.__dict__)
        state["_discovery"] = None
        return state

    @property
    def discovery(self) -> Discovery:
        """The driver-side consumer, created on first use."""
        if self._discovery is None:
            self._discovery = Discovery(self.options)
        return self._discovery

    def schema(self) -> pa.Schema:
        return self._schema

    def default_limit(self) -> ReadLimit:
        return ReadLimit(max_records=self.options.max_offsets_per_trigger)

    def initial_offset(self) -> Offset:
        """The start: pinned by an earlier run of the query, else resolved (and pinned if it
        depends on the moment; see the module docs on ``latest``).

        Crash tests kill here with fault point ``kafka.after_initial_offset``: the start is
        known (and pinned), Spark has not written ``offsets/0``.
        """
        if self._initial is None:
            self._initial = self._pinned_or_resolved()
            AFTER_INITIAL_OFFSET.fire()
        return self._initial

    def _check_folder(self) -> None:
        """Once per run, on the driver: option checkpointLocation names the query's checkpoint
        (the tasks write their counts there)."""
        if not self._folder_checked and self.folder is not None:
            self.folder.check()
            self._folder_checked = True

    def _pinned_or_resolved(self) -> Offset:
        self._check_folder()
        key = {
            "startingOffsets": self.options.starting_offsets.strip(),
            "startingTimestamp": self.options.starting_timestamp,
        }
        pinned = self.folder.pinned_start(key) if self.folder is not None else None
        if pinned is not None:
            logger.info("firesteel.kafka: starting at %s, pinned by an earlier run", pinned)
            return pinned
        start, depends_on_time = self._resolve_initial()
        if depends_on_time:
            if self.folder is None:
                msg = (
                    "firesteel.kafka: the start depends on when it is resolved "
                    f"(startingOffsets={self.options.starting_offsets!r}, "
                    f"startingTimestamp={self.options.starting_timestamp}), so it must be "
                    "pinned in the query's checkpoint: set option 'checkpointLocation' to the "
                    "value given to writeStream, or start from earliest or explicit offsets"
                )
                raise ConfigError(msg)
            self.folder.pin_start(key, start)
            logger.info("firesteel.kafka: starting at %s, pinned in the checkpoint", start)
        return start

    def _resolve_initial(self) -> tuple[Offset, bool]:
        """The start and whether it depends on the time it is resolved (a log end)."""
        tps = self.discovery.topic_partitions()
        if self.options.starting_timestamp is not None:
            found = self.discovery.offsets_for_times(tps, self.options.starting_timestamp)
            ends = self.discovery.latest([tp for tp, o in found.items() if o < 0])
            return to_offset({**found, **ends}), bool(ends)
        text = self.options.starting_offsets.strip()
        if text.lower() == "earliest":
            return to_offset(self.discovery.earliest(tps)), False
        if text.lower() == "latest":
            return to_offset(self.discovery.latest(tps)), True
        given = parse_partition_offsets(text, "startingOffsets")
        unknown = sorted(set(given) - set(tps))
        if unknown:
            msg = (
                f"firesteel.kafka: option 'startingOffsets' names partitions that do not exist "
                f"or are not subscribed: {unknown}"
            )
            raise ConfigError(msg)
        earliest = self.discovery.earliest([tp for tp, o in given.items() if o == EARLIEST])
        latest = self.discovery.latest([tp for tp, o in given.items() if o == LATEST])
        missing = [tp for tp in tps if tp not in given]
        # Partitions the JSON leaves out start at the end, like Spark's.
        latest.update(self.discovery.latest(missing))
        positions = {tp: earliest.get(tp, latest.get(tp, o)) for tp, o in given.items()}
        positions.update({tp: latest[tp] for tp in missing})
        return to_offset(positions), bool(latest)

    def latest_offset(self, start: Offset, limit: ReadLimit) -> Offset:
        self._check_folder()
        positions = from_offset(start)
        current = self.discovery.topic_partitions()
        new = [tp for tp in current if tp not in positions]
        if new:
            logger.info("firesteel.kafka: new partitions %s start at their earliest offset", new)
        known = [tp for tp in current if tp in positions]
        ends = self.discovery.latest(known)
        with timed("kafka.lag_record"):
            self._record_lag(positions, ends)
        restarted = self._went_back(ends, positions)
        for tp in restarted:
            del ends[tp]
        if self._available_now is not None:
            frozen = self._available_now
            ends = {tp: min(e, frozen.get(tp, positions[tp])) for tp, e in ends.items()}
        ends = {tp: max(e, positions[tp]) for tp, e in ends.items()}
        if limit.max_records is not None:
            available = {tp: ends[tp] - positions[tp] for tp in ends}
            grant = fair_share(available, limit.max_records)
            ends = {tp: positions[tp] + grant[tp] for tp in ends}
        ends.update(restarted)
        result = dict(positions)
        result.update(ends)
        result.update(self.discovery.earliest(new))
        return to_offset(result)

    def _went_back(
        self, ends: dict[TopicPartitionKey, int], positions: dict[TopicPartitionKey, int]
    ) -> dict[TopicPartitionKey, int]:
        """Partitions whose log now ends before the query's position (deleted and recreated),
        with the offset each continues from.

        A shrinking end is checked twice (a lagging broker's end can look short
        once). ``failOnDataLoss`` fails the query naming the partitions;
        otherwise each restarts at its new log's earliest offset, read from the
        next batch on (this batch reads nothing of it: its end lies before its
        start), and the records between are logged as lost.
        """
        shrunk = [tp for tp, e in ends.items() if e < positions[tp]]
        if not shrunk:
            return {}
        again = self.discovery.latest(shrunk)
        gone = {tp: e for tp, e in again.items() if e < positions[tp]}
        if not gone:
            ends.update({tp: max(ends[tp], again[tp]) for tp in shrunk})
            return {}
        described = ", ".join(
            f"{t}[{p}] from {positions[(t, p)]} to {e}" for (t, p), e in sorted(gone.items())
        )
        if self.options.fail_on_data_loss:
            msg = (
                f"firesteel.kafka: the end offset went back ({described}): the topic was "
                "deleted and recreated, or its log truncated, and records the query had not "
                "read may be lost. Set option failOnDataLoss=false to continue from the new "
                "log's start"
            )
            raise DataLossError(msg)
        restart = self.discovery.earliest(gone)
        logger.warning(
            "firesteel.kafka: the end offset went back (%s); failOnDataLoss=false: "
            "continuing from the new log's start %s",
            described,
            restart,
        )
        return restart

    def prepare_available_now(self) -> None:
        self._available_now = self.discovery.latest(self.discovery.topic_partitions())

    def partitions(self, start: Offset, end: Offset) -> Sequence[OffsetRange]:
        begin = from_offset(start)
        return [
            OffsetRange(topic, partition, begin[(topic, partition)], stop)
            for (topic, partition), stop in sorted(from_offset(end).items())
            if (topic, partition) in begin and stop > begin[(topic, partition)]
        ]

    def read(self, partition: OffsetRange) -> Iterator[pa.RecordBatch]:
        dead_letter = (
            TopicDeadLetter(self.options.errors_topic, self.options.passthrough)
            if self.options.errors_topic
            else None
        )
        reader = RangeReader(self.options, self.decoder, dead_letter, self._schema)
        yield from reader.read(partition)

    def report_latest_offset(self) -> Offset | None:
        """Bad records skipped and quarantined so far (query progress shows them as this
        source's ``latestOffset``): counted by the tasks in the checkpoint, up to the batch
        before the one being planned."""
        return dict(self.folder.counts()) if self.folder is not None else None

    def _record_lag(
        self, positions: dict[TopicPartitionKey, int], ends: dict[TopicPartitionKey, int]
    ) -> None:
        """Record how far the committed ``positions`` (Spark plans a batch from the last
        committed end) are behind the log ``ends`` just read for planning, for ``firesteel
        status``: the log ends the planning needs anyway, so no request of its own."""
        if self.folder is None:
            return
        lag = {f"{t}[{p}]": max(ends.get((t, p), o) - o, 0) for (t, p), o in positions.items()}
        self.folder.record_progress(
            {
                "at": time.time(),
                "committed": {f"{t}[{p}]": o for (t, p), o in positions.items()},
                "log_end": {f"{t}[{p}]": e for (t, p), e in ends.items()},
                "lag": lag,
                "lag_total": sum(lag.values()),
            }
        )

    def commit(self, end: Offset) -> None:
        if self.options.progress_group_id:
            self.discovery.commit_progress(self.options.progress_group_id, from_offset(end))

    def stop(self) -> None:
        if self._discovery is not None:
            self._discovery.close()
            self._discovery = None
