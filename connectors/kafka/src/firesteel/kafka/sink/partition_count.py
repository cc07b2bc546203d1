"""The in-task mode's check that a re-run batch kept its partition count.

``exactly.once.mode=in-task`` keys transactions and markers by Spark partition
number, and the tasks commit before the driver learns how many there are
(PySpark tells a Python task neither its stage's partition count nor the
count Spark passes to a JVM writer). So the driver's commit of batch N is the
first moment anything knows the count, and the check happens there, after the
re-run's tasks committed: it stops the query from going on, it cannot undo what
those tasks wrote or skipped. :class:`PartitionLayout` keeps, in the query's
checkpoint, the count the last committed batch ran with and the largest count
any batch ran with, and fails the commit of batch N with
:class:`PartitioningChangedError` naming both counts when

* N was committed here before with another count (the driver died after its
  commit, before Spark wrote ``commits/N``) and a task of this attempt wrote
  rows (a re-run whose tasks all found their markers changed nothing), or
* a partition at or past this attempt's count holds a marker for N: an
  earlier attempt ran with more partitions than this one, so this one's
  skipped or re-written partitions cannot match what that one committed.

An earlier attempt with fewer partitions whose commit never ran leaves no
trace that tells its count (each of its tasks knew only its own number), so
that case is not detected: see the README's Known limits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from firesteel.core.spi import SinkError
from firesteel.core.toolkit import layout, read_record, write_record

logger = logging.getLogger(__name__)

LAYOUT_KIND = "kafka-sink-layout"
LAYOUT_VERSION = 1


class PartitioningChangedError(SinkError):
    """A batch re-ran with another partition count than an earlier attempt committed."""


class PartitionLayout:
    """The partition counts of one in-task sink's batches, kept in the query's checkpoint."""

    def __init__(self, checkpoint: str, sink_id: str) -> None:
        self.location = f"{layout.sink(checkpoint, 'kafka', sink_id)}/layout.json"
        self.sink_id = sink_id

    def check(
        self,
        batch_id: int,
        partitions: int,
        wrote: bool,
        committed_at: Callable[[int, int], bool],
    ) -> None:
        """Fail if batch ``batch_id`` re-ran with another count than before, else record it.

        ``wrote``: a task of this attempt wrote rows (did not find its marker).
        ``committed_at(partition, batch)`` says whether that partition's marker
        covers the batch; it is asked only for partitions at or past
        ``partitions`` that an earlier batch had.
        """
        try:
            last = read_record(self.location, LAYOUT_KIND, (LAYOUT_VERSION,))
        except FileNotFoundError:
            last = {"batch": -1, "partitions": 0, "most": 0}
        if last["batch"] == batch_id:
            if last["partitions"] != partitions and wrote:
                self._fail(batch_id, str(last["partitions"]), partitions)
            return
        for partition in range(partitions, int(last["most"])):
            if committed_at(partition, batch_id):
                self._fail(batch_id, f"at least {partition + 1}", partitions)
        most = max(int(last["most"]), partitions)
        record = {"batch": batch_id, "partitions": partitions, "most": most}
        write_record(self.location, LAYOUT_KIND, LAYOUT_VERSION, record)

    def _fail(self, batch_id: int, before: str, now: int) -> None:
        msg = (
            f"firesteel.kafka sink {self.sink_id}: batch {batch_id} re-ran with {now} "
            f"partitions, but an earlier attempt committed it with {before} "
            "(exactly.once.mode=in-task keys its transactions by Spark partition, so the "
            "re-run's tasks may have written rows again or skipped rows). Restart with the "
            f"earlier partition count ({before}: repartition(n) or the operator's "
            "parallelism); exactly.once.mode=write-ahead, the default, survives such changes"
        )
        raise PartitioningChangedError(msg)
