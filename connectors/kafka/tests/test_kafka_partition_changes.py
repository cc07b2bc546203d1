"""A batch re-run with another partition count, driven through the sink protocol.

The write-ahead mode (the default) rolls the batch's recorded plan forward, so
the output stays exact in both directions; the in-task mode cannot, and its
driver commit fails the query naming both counts. Tasks and commits run on
the test's thread against the session's broker; a plain ``read_committed``
consumer counts the output.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest

from firesteel.core.context import TaskScope
from firesteel.core.options import parse_options
from firesteel.core.sink import Sink, Vote
from firesteel.kafka.options import PASSTHROUGH, KafkaSinkOptions
from firesteel.kafka.sink import KafkaExactlyOnceSink, KafkaWriteAheadSink
from firesteel.kafka.sink.partition_count import PartitioningChangedError, PartitionLayout
from firesteel.testing.kafka import create_topic, read_committed

pytestmark = pytest.mark.usefixtures("worker_pool")

RECORDS = 40


class CommitInterrupted(RuntimeError):
    """The driver died in the middle of a batch's commit."""


def _options(bootstrap: str, topic: str, mode: str) -> KafkaSinkOptions:
    raw = {
        "kafka.bootstrap.servers": bootstrap,
        "topic": topic,
        "guarantee": "exactly-once",
        "exactly.once.mode": mode,
    }
    return parse_options(KafkaSinkOptions, raw, passthrough_prefixes=PASSTHROUGH)


def _tasks(
    sink: Sink, batch_id: int, partitions: int, only: Sequence[int] | None = None
) -> list[Vote]:
    """Batch ``batch_id``'s rows dealt round robin over ``partitions`` write tasks
    (as ``repartition(n)`` deals them); ``only`` runs just those tasks."""
    seqs = range(batch_id * RECORDS, (batch_id + 1) * RECORDS)
    votes = []
    for partition in range(partitions) if only is None else only:
        values = [str(s).encode() for s in seqs if s % partitions == partition]
        rows = pa.record_batch({"value": pa.array(values, pa.binary())})
        scope = TaskScope("query", batch_id, partition, 0)
        votes.append(sink.write_partition(scope, iter([rows])))
    return votes


def _counted(bootstrap: str, topic: str) -> Counter[int]:
    return Counter(int(r.value or b"") for r in read_committed(bootstrap, topic))


@pytest.mark.parametrize(("before", "after"), [(4, 2), (2, 4)])
def test_write_ahead_rolls_a_half_sent_plan_forward_over_another_count(
    bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, before: int, after: int
) -> None:
    topic = create_topic(bootstrap, partitions=1)
    checkpoint = str(tmp_path / "ck")
    first = KafkaWriteAheadSink(
        _options(bootstrap, topic, "write-ahead"), f"wal-{topic}", checkpoint
    )
    first.prepare()
    send = first.send_values

    def dies_at_the_second_segment(batches, batch_id, partition):  # type: ignore[no-untyped-def]
        if partition == 1:
            raise CommitInterrupted
        send(batches, batch_id, partition)

    monkeypatch.setattr(first, "send_values", dies_at_the_second_segment)
    with pytest.raises(CommitInterrupted):
        first.commit_batch(3, _tasks(first, 3, before))
    assert sorted(_counted(bootstrap, topic)) == list(range(120, 160, before))

    rerun = KafkaWriteAheadSink(
        _options(bootstrap, topic, "write-ahead"), f"wal-{topic}", checkpoint
    )
    rerun.prepare()
    rerun.commit_batch(3, _tasks(rerun, 3, after))
    rerun.commit_batch(3, _tasks(rerun, 3, after))
    assert _counted(bootstrap, topic) == Counter(range(120, 160))


def _in_task(bootstrap: str, checkpoint: Path) -> tuple[KafkaExactlyOnceSink, str]:
    """A prepared in-task sink with its partition-count record, and its new topic."""
    topic = create_topic(bootstrap, partitions=1)
    sink_id = f"in-task-{topic}"
    layout = PartitionLayout(str(checkpoint), sink_id)
    sink = KafkaExactlyOnceSink(_options(bootstrap, topic, "in-task"), sink_id, layout)
    sink.prepare()
    return sink, topic


def test_in_task_fails_a_rerun_with_fewer_partitions_than_its_first_attempt(
    bootstrap: str, tmp_path: Path
) -> None:
    sink, _topic = _in_task(bootstrap, tmp_path / "ck")
    sink.commit_batch(4, _tasks(sink, 4, 4))
    # Batch 5's first attempt: partitions 0 and 3 committed, then the job died.
    _tasks(sink, 5, 4, only=[0, 3])
    votes = _tasks(sink, 5, 2)
    with pytest.raises(PartitioningChangedError, match=r"batch 5 re-ran with 2 .* at least 4"):
        sink.commit_batch(5, votes)


def test_in_task_fails_a_rerun_with_more_partitions_than_its_committed_attempt(
    bootstrap: str, tmp_path: Path
) -> None:
    sink, topic = _in_task(bootstrap, tmp_path / "ck")
    sink.commit_batch(6, _tasks(sink, 6, 2))
    # The driver died after its commit, before Spark wrote commits/6: a re-run with 2
    # partitions again, or fewer, skips every task and is exact...
    sink.commit_batch(6, _tasks(sink, 6, 1))
    assert _counted(bootstrap, topic) == Counter(range(240, 280))
    # ... but with 4, partitions 2 and 3 write rows that partitions 0 and 1 committed.
    votes = _tasks(sink, 6, 4)
    with pytest.raises(PartitioningChangedError, match=r"batch 6 re-ran with 4 .* with 2 "):
        sink.commit_batch(6, votes)
    assert max(_counted(bootstrap, topic).values()) == 2
