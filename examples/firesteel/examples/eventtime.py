"""What the event-time examples share: input files per micro-batch, a local session, and the
exactly-once output split into its main and late records.

Each example (:mod:`~firesteel.examples.sessionizer`, :mod:`~firesteel.examples.timeouts`,
:mod:`~firesteel.examples.interval_join`) writes its input as JSON lines, one file per
micro-batch, runs one query (``Trigger.AvailableNow``) through the transactional file sink,
and prints what it committed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

EPOCH = 1_800_000_000
"""The examples' first event time (epoch seconds)."""


def write_batches(folder: Path, batches: Sequence[Sequence[dict[str, Any]]]) -> None:
    """One JSON-lines file per micro-batch, stamped so the file source takes them in order;
    an ``at`` value (seconds after :data:`EPOCH`) becomes the ``ts`` column."""
    folder.mkdir(parents=True, exist_ok=True)
    for index, records in enumerate(batches):
        if not records:
            continue  # no file: this input has nothing in that micro-batch
        lines = []
        for record in records:
            row = {k: v for k, v in record.items() if k != "at"}
            row["ts"] = (EPOCH + record["at"]) * 1_000_000
            lines.append(json.dumps(row))
        target = folder / f"batch-{index:04d}.json"
        hidden = folder / f".{target.name}"
        hidden.write_text("\n".join(lines) + "\n")
        os.utime(hidden, (EPOCH + index, EPOCH + index))
        hidden.rename(target)


def session(app: str) -> Any:
    """A local SparkSession on 127.0.0.1 with every firesteel connector registered."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from firesteel.core.spark.session import LOOPBACK, local_session

    return local_session(
        app,
        config={"spark.ui.showConsoleProgress": "false", **LOOPBACK},
    )


def read_json_stream(spark: Any, folder: Path, schema: str) -> Any:
    """The stream of ``folder``'s JSON files, one file per micro-batch; ``ts`` is epoch
    microseconds in the files, a timestamp in the stream."""
    from pyspark.sql import functions as F

    raw = (
        spark.readStream.format("firesteel.files")
        .schema(f"{schema}, ts long")
        .option("format", "json")
        .option("max.files.per.batch", "1")
        .load(str(folder))
    )
    return raw.withColumn("ts", F.timestamp_micros("ts"))


def run_exactly_once(result: Any, root: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run ``result`` over everything available into ``root/output`` (the transactional file
    sink, exactly-once); its committed main rows and late records."""
    from firesteel.files import read_committed

    query = (
        result.writeStream.format("firesteel.files")
        .option("path", str(root / "output"))
        .option("format", "parquet")
        .option("guarantee", "exactly-once")
        .option("checkpointLocation", str(root / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    table = read_committed(str(root / "output"))
    if table.num_rows == 0:
        return [], []
    if "__late" not in table.column_names:
        return table.to_pylist(), []
    late = pc.is_valid(table.column("__late"))
    main = table.filter(pc.invert(late)).drop_columns(["__late"]).to_pylist()
    return main, [row["__late"] for row in table.filter(late).to_pylist()]
