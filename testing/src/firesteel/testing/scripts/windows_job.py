"""Crash-test job: firesteel.files source -> event-time windows -> firesteel.files.

Usage: windows_job.py <input dir> <output dir> <checkpoint> <state uri> <files per batch>
<parallelism> <input partitions> [sessions | sessions-per-key | tumbling]

``sessions`` (the default): session windows with late data to the side output
(:func:`~firesteel.testing.windows.session_counts`), on columns; ``sessions-per-key``: the
same per key (an aggregate without Arrow form); ``tumbling``: tumbling windows dropping
late records, combined per key and window before the shuffle
(:func:`~firesteel.testing.windows.tumbling_counts`).

Input rows are ``(seq, key, ts)`` (:func:`~firesteel.testing.windows.write_window_files`);
the output holds one row per emitted session window ``(key, window_start, window_end,
count, seq_sum)`` and one per late record (in ``__late``), written exactly-once, for
:func:`~firesteel.testing.windows.check_window_output` to compare with the reference.
``input partitions`` > 0 repartitions the input before the operator. The state is on the
filesystem backend.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from firesteel.backends import FilesystemBackend
from firesteel.testing.jobs import job_session, read_parquet_files, write_files_exactly_once
from firesteel.testing.windows import session_counts, tumbling_counts

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from firesteel.state.backend import StateBackend


def main() -> None:
    source, out, checkpoint, state_uri, files_per_batch, parallelism, partitions = sys.argv[1:8]
    operators: dict[str, Callable[[DataFrame, StateBackend, int, int], DataFrame]] = {
        "sessions": session_counts,
        "sessions-per-key": partial(session_counts, per_key=True),
        "tumbling": tumbling_counts,
    }
    operator = operators[sys.argv[8] if len(sys.argv) > 8 else "sessions"]
    spark = job_session("firesteel-windows-crash")
    records = read_parquet_files(spark, source, files_per_batch)
    backend = FilesystemBackend(state_uri, full_snapshot_every=3, retain=3)
    windows = operator(records, backend, int(parallelism), int(partitions))
    write_files_exactly_once(spark, windows, out, checkpoint)


if __name__ == "__main__":
    main()
