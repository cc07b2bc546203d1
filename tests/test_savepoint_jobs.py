"""Savepoints with real Structured Streaming queries (Spark local mode).

``test_upgrade_a_job`` runs the "Upgrade a job" guide (docs/state/savepoints.md) step by step: a
job on the filesystem backend, a savepoint taken with the ``firesteel`` command,
a new version of the processor started from it on RocksDB at another
parallelism, on the same Spark checkpoint (refused first from a savepoint of an earlier
batch). ``test_a_bootstrapped_job_continues_counting``
writes a savepoint from a DataFrame and starts a new job from it (refused first
while the savepoint holds an operator the job does not restore).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle
from test_state_operator import (
    RunningCount,
    expected_counts,
    latest_counts,
    readings,
    run_query,
    write_inputs,
)

from firesteel.backends import FilesystemBackend
from firesteel.backends.inspect import backend_class, read_state
from firesteel.backends.savepoint import read_savepoint
from firesteel.cli.status import query_status, render
from firesteel.core.errors import ConfigError
from firesteel.core.metrics.task import HANDOVER_DIR
from firesteel.state import KeyState, StateBackend, ValueStateDescriptor
from firesteel.state.savepoint import SavepointRestore, bootstrap, open_savepoint, rewrite
from firesteel.state.savepoint.format import OperatorRows, write_savepoint

cloudpickle.register_pickle_by_value(sys.modules[__name__])

# Three queries each (about 80 s and 30 s on this machine): out of the fast loop.
pytestmark = pytest.mark.slow


class RunningCountV2(RunningCount):
    """Version 2 of the job's processor: keeps each sensor's peak reading as well."""

    peak = ValueStateDescriptor("peak", float)

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        peak = state.value(self.peak)
        peak.update(max([peak.value() or 0.0, *rows.column("value").to_pylist()]))
        return super().process(key, rows, state)


def run(spark: Any, root: Path, processor: Any, backend: StateBackend, **options: Any) -> None:
    """One availableNow run of the counting job over ``root/in`` into ``root/out``."""
    run_query(spark, root / "in", root, processor, backend=backend, **options)


def test_upgrade_a_job(spark: Any, tmp_path: Path) -> None:
    first = [readings(b) for b in range(3)]
    write_inputs(tmp_path / "in", first)
    # Version 1 runs on the filesystem backend and stops after its last batch committed.
    v1_state = f"file://{tmp_path}/state-v1"
    run(spark, tmp_path, RunningCount(), FilesystemBackend(v1_state), parallelism=2)
    # Step 1: take a savepoint of the last committed batch.
    savepoint = str(tmp_path / "savepoints" / "v1")
    command = [sys.executable, "-m", "firesteel.cli.main", "savepoint", "create"]
    taken = subprocess.run(
        [*command, v1_state, savepoint, "--checkpoint", str(tmp_path / "checkpoint")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "of batch 2" in taken.stdout
    # Step 2: version 2, on RocksDB at parallelism 4, starts from it on the same checkpoint.
    second = [readings(b) for b in range(3, 5)]
    write_inputs(tmp_path / "in", second, start=1000)
    rocksdb: Any = backend_class("rocksdb")
    v2_state = f"file://{tmp_path}/state-v2"
    v2_backend = rocksdb(v2_state, local_dir=str(tmp_path / "local"))
    # A savepoint of an earlier batch would lose batch 2's records from the state: refused.
    older = str(tmp_path / "savepoints" / "batch-1")
    subprocess.run(
        [*command, v1_state, older, "--checkpoint", str(tmp_path / "checkpoint"), "--batch", "1"],
        check=True,
    )
    # firesteel status lists the savepoints taken of the query, oldest first.
    status = query_status(str(tmp_path / "checkpoint"))
    assert [(t["batch"], t["location"]) for t in status["savepoints"]] == [
        (2, savepoint),
        (1, older),
    ]
    assert f"of batch 1 at {older} (" in render(status, time.time())
    with pytest.raises(Exception, match=r"goes on after batch 2: the state would miss.*batch 2"):
        run(spark, tmp_path, RunningCountV2(), v2_backend, parallelism=4, restore_from=older)
    run(spark, tmp_path, RunningCountV2(), v2_backend, parallelism=4, restore_from=savepoint)
    assert latest_counts(tmp_path) == expected_counts(first + second)
    state = read_state(v2_state).to_pandas()
    assert set(state["state"]) >= {"count", "total", "peak"}
    # Version 1 knew nothing of "peak": a savepoint of version 2 refuses to go back to it.
    back = str(tmp_path / "savepoints" / "v2")
    subprocess.run(
        [*command, v2_state, back, "--checkpoint", str(tmp_path / "checkpoint")], check=True
    )
    with pytest.raises(Exception, match=r"holds value state 'peak'.*would be dropped"):
        run(
            spark,
            tmp_path,
            RunningCount(),
            FilesystemBackend(f"file://{tmp_path}/state-back"),
            parallelism=2,
            restore_from=back,
            checkpoint="checkpoint-back",
        )


def test_a_bootstrapped_job_continues_counting(spark: Any, tmp_path: Path) -> None:
    states = [RunningCount.count, RunningCount.total]
    start = {"s0": (10, 100.0), "s1": (20, 200.0), "s5": (1, 0.5)}
    counts = spark.createDataFrame(
        [(s, "count", c) for s, (c, _) in start.items()], "sensor string, state string, value long"
    )
    totals = spark.createDataFrame(
        [(s, "total", t) for s, (_, t) in start.items()],
        "sensor string, state string, value double",
    )
    savepoint = str(tmp_path / "bootstrap")
    bootstrap(
        [counts, totals],
        savepoint,
        operator="counts",
        key=["sensor"],
        states=states,
        max_parallelism=16,
    )
    # Rewrite two keys' counts: s5's is removed (its total stays), s1's starts at 7.
    fixes = spark.createDataFrame(
        [("s1", "count", 7), ("s5", "count", None)], "sensor string, state string, value long"
    )
    fixed = str(tmp_path / "bootstrap-fixed")
    rewrite(savepoint, fixes, fixed, operator="counts", states=[RunningCount.count])
    seeded = read_savepoint(fixed).to_pandas()
    assert sorted(seeded[seeded["state"] == "count"]["value"]) == ["10", "7"]
    # Both record each state's type, as a checkpoint does, so a restore checks it; a
    # rewrite under another type would mix two types in one state, and is refused.
    for written in (savepoint, fixed):
        recorded = open_savepoint(written).operator("counts").states
        assert (recorded["count"]["schema"], recorded["total"]["schema"]) == ('"long"', '"double"')
    as_float = ValueStateDescriptor("count", float)
    with pytest.raises(ConfigError, match=r"rewrite: state 'count' .* \"long\" .* \"double\""):
        rewrite(savepoint, fixes, str(tmp_path / "mixed"), operator="counts", states=[as_float])

    # A savepoint also holding an operator the job no longer has ("retired") is refused at
    # the first batch, naming it; told to drop it, the job starts from "counts" alone.
    part = open_savepoint(fixed).operator("counts")
    kept = OperatorRows(
        key_columns=part.key_columns,
        max_parallelism=part.max_parallelism,
        states=part.states,
        rows=part.rows(),
    )
    with_retired = str(tmp_path / "bootstrap-with-retired")
    write_savepoint(
        with_retired,
        batch=-1,
        operators={"counts": kept, "retired": kept},
        offsets=None,
        origin={"bootstrap": True},
    )
    files = [readings(b, sensors=6) for b in range(2)]
    refused = tmp_path / "refused"
    write_inputs(refused / "in", files)
    with pytest.raises(Exception, match=r"holds the state of operator 'retired'.*would be dropped"):
        run(
            spark,
            refused,
            RunningCount(),
            FilesystemBackend(f"file://{refused}/state"),
            parallelism=3,
            restore_from=with_retired,
        )
    write_inputs(tmp_path / "in", files)
    backend = FilesystemBackend(f"file://{tmp_path}/state")
    restore = SavepointRestore(with_retired, allow_non_restored_state=True)
    run(spark, tmp_path, RunningCount(), backend, parallelism=3, restore_from=restore)
    expected = expected_counts(files)
    seeds = {"s0": (10, 100.0), "s1": (7, 200.0), "s5": (0, 0.5)}
    for sensor, (count, total) in seeds.items():
        added_count, added_total = expected[sensor]
        expected[sensor] = (count + added_count, total + added_total)
    assert latest_counts(tmp_path) == expected


def test_a_running_job_stopped_from_the_cli_goes_on_from_its_savepoint(
    spark: Any, tmp_path: Path
) -> None:
    """``firesteel savepoint stop CHECKPOINT --to PATH``, run in another process, stops a
    running keyed job (file source -> ranks per key -> file sink, exactly-once): the
    driver's listener takes the request after a batch, the savepoint is of the batch the
    query last committed, and the job restarted from it on the same checkpoint (state in
    a new location) ends with every key ranked 1..n exactly once, read back with pyarrow."""
    import time

    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from firesteel.state import stateful
    from firesteel.testing.processors import RankPerKey

    source = tmp_path / "in"
    source.mkdir()

    def write(index: int) -> int:
        seqs = list(range(index * 40, index * 40 + 40))
        table = pa.table({"seq": seqs, "key": [f"k{s % 10}" for s in seqs]})
        pq.write_table(table, source / f"f{index}.parquet")
        return len(seqs)

    def start(state: str, restore_from: str | None, **trigger: Any) -> Any:
        reader = (
            spark.readStream.format("firesteel.files")
            .option("max.files.per.batch", "1")
            .load(str(source))
        )
        ranked = stateful(
            reader,
            key="key",
            processor=RankPerKey(),
            output_schema="seq long, key string, rank long",
            backend=FilesystemBackend(state),
            name="ranks",
            parallelism=2,
            max_parallelism=8,
            restore_from=restore_from,
        )
        return (
            ranked.writeStream.format("firesteel.files")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "ck"))
            .option("guarantee", "exactly-once")
            .trigger(**trigger)
            .start()
        )

    written = write(0) + write(1)
    query = start(f"file://{tmp_path}/state-v1", None, processingTime="200 milliseconds")
    deadline = time.monotonic() + 120
    while sum(p["numInputRows"] for p in query.recentProgress) < written:
        assert query.exception() is None and time.monotonic() < deadline
        time.sleep(0.2)
    written += write(2)  # lands while the query runs: in the stopped job or the next one
    handed_over = Path(tempfile.gettempdir()) / HANDOVER_DIR / str(query.id)
    assert handed_over.is_dir()
    savepoint = tmp_path / "savepoints" / "stop"
    command = [sys.executable, "-m", "firesteel.cli.main", "savepoint", "stop"]
    stopped = subprocess.run(
        [*command, str(tmp_path / "ck"), "--to", str(savepoint), "--timeout", "120"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert stopped.returncode == 0, stopped.stderr
    assert not query.isActive
    commits = [int(p.name) for p in (tmp_path / "ck" / "commits").iterdir() if p.name.isdigit()]
    assert f"savepoint of batch {max(commits)} at {savepoint}" in stopped.stdout
    assert max(commits) >= 1
    assert not (tmp_path / "ck" / "firesteel" / "control" / "stop.json").exists()
    # The stopped query's metrics hand-over folder goes when the listener hears of the stop.
    deadline = time.monotonic() + 60
    while handed_over.exists():
        assert time.monotonic() < deadline, f"{handed_over} left after the query stopped"
        time.sleep(0.2)

    written += write(3)
    again = start(f"file://{tmp_path}/state-v2", str(savepoint), availableNow=True)
    again.awaitTermination(240)
    assert again.exception() is None
    out = ds.dataset(str(tmp_path / "out")).to_table().to_pylist()
    assert sorted(row["seq"] for row in out) == list(range(written))
    ranks: dict[str, list[int]] = {}
    for row in sorted(out, key=lambda row: row["seq"]):
        ranks.setdefault(row["key"], []).append(row["rank"])
    assert all(r == list(range(1, len(r) + 1)) for r in ranks.values())
