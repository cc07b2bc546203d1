"""Helpers shared by the Cassandra crash tests."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def write_seq_files(folder: Path, files: int, rows_per_file: int) -> Path:
    """``files`` Parquet files in a new ``folder``, holding ``seq`` 0, 1, ... in order."""
    folder.mkdir()
    for index in range(files):
        seqs = list(range(index * rows_per_file, (index + 1) * rows_per_file))
        pq.write_table(pa.table({"seq": seqs}), folder / f"{index:03d}.parquet")
    return folder
