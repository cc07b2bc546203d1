"""Any firesteel sink as a ``foreachBatch`` callable, for jobs that want driver-side control."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator

import pyarrow as pa
from pyspark import cloudpickle
from pyspark.sql import DataFrame

from firesteel.core.context import TaskScope
from firesteel.core.guarantee import Guarantee
from firesteel.core.metrics.task import measured_write
from firesteel.core.sink import Sink, Vote
from firesteel.core.spark.writer import check_guarantee, commit_batch

_VOTE_SCHEMA = "vote binary"
_ARROW_SCHEMA = pa.schema([("vote", pa.binary())])


def foreach_batch(
    sink: Sink, checkpoint_location: str, guarantee: Guarantee | None = None
) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function writing each micro-batch through ``sink``.

    ``checkpoint_location`` must be the query's own, so the guarantee check
    sees its sources. The write tasks run as ``mapInArrow`` (Arrow end to end);
    their votes come back to the driver cloudpickled (as Spark itself returns
    a data source writer's commit messages, so typed committables keep their
    class, even one defined in the job's own script), and the driver commits
    the batch exactly as the ``writeStream.format(...)`` path does.
    """
    state = {"prepared": False}

    def write_tasks(
        batch_id: int,
    ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            vote = measured_write(sink, TaskScope.current(batch_id), batches)
            yield pa.RecordBatch.from_pydict(
                {"vote": [cloudpickle.dumps(vote)]}, schema=_ARROW_SCHEMA
            )

        return run

    def process(df: DataFrame, batch_id: int) -> None:
        if not state["prepared"]:
            check_guarantee(sink, checkpoint_location, guarantee)
            sink.prepare()
            state["prepared"] = True
        rows = df.mapInArrow(write_tasks(batch_id), _VOTE_SCHEMA).collect()
        votes: list[Vote] = [pickle.loads(row["vote"]) for row in rows]
        commit_batch(sink, checkpoint_location, batch_id, votes)

    return process
