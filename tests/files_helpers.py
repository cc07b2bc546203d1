"""Helpers shared by the file connector tests: writing inputs, running availableNow queries."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def rows(start: int, count: int) -> pa.Table:
    """Sequence-numbered rows ``seq`` with a small-cardinality ``key`` column."""
    seq = list(range(start, start + count))
    return pa.table({"seq": seq, "key": [f"k{s % 3}" for s in seq]})


def write_sequence_files(
    folder: Path,
    files: int,
    rows_per_file: int,
    columns: Callable[[range], dict[str, Any]] | None = None,
    name: str = "part-{index:04d}.parquet",
) -> range:
    """Write ``files`` Parquet files of ``rows_per_file`` consecutive int64 ``seq`` values
    each (file ``index`` named by ``name``), plus whatever ``columns(seqs)`` derives;
    the seqs written, as a range.

    The source lists files by name, so ``name`` fixes which files share a batch.
    """
    folder.mkdir(parents=True)
    for index in range(files):
        seqs = range(index * rows_per_file, (index + 1) * rows_per_file)
        extra = columns(seqs) if columns is not None else {}
        table = pa.table({"seq": pa.array(seqs, pa.int64()), **extra})
        pq.write_table(table, folder / name.format(index=index))
    return range(files * rows_per_file)


def write_input(folder: Path, name: str, table: pa.Table, fmt: str) -> Path:
    """Write ``table`` as one file of ``fmt`` (parquet, csv, json lines, text)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if fmt == "parquet":
        pq.write_table(table, path)
    elif fmt == "csv":
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, path)
    elif fmt == "json":
        with path.open("w") as out:
            for record in table.to_pylist():
                out.write(json.dumps(record) + "\n")
    else:
        with path.open("w") as out:
            for record in table.to_pylist():
                out.write(f"{record['seq']},{record['key']}\n")
    return path


def run_available_now(reader: Any, writer_options: dict[str, str], fmt: str = "firesteel.files"):
    """Run ``reader`` (a streaming DataFrame) once with Trigger.AvailableNow; the query.

    A failed query is returned too: its error is ``query.exception()``.
    """
    writer = reader.writeStream.format(fmt)
    for key, value in writer_options.items():
        writer = writer.option(key, value)
    from pyspark.errors import StreamingQueryException

    query = writer.trigger(availableNow=True).start()
    with contextlib.suppress(StreamingQueryException):  # the caller checks query.exception()
        query.awaitTermination(240)
    return query


def data_batches(query: Any) -> list[int]:
    """Input row counts of the query's batches that read anything."""
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]
