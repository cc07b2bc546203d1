"""Broadcast state inside real Structured Streaming queries (Spark local mode, shared session).

A rules stream (JSON files: per-sensor limits, several updates of one sensor in
one file) is the broadcast input of a keyed operator over readings; every
reading is emitted with the limit its partition saw and a digest of the whole
broadcast map. Restarted at parallelism 2, 3 and 1 (rescaling the key groups
and their broadcast copies), every partition of every batch must hold the same
map, and at the end every key group's copy must equal the rules applied in
order in plain Python.

The crash test runs the same kind of job (records and rules from
``firesteel.files``, the exactly-once file sink) under SIGKILLs, restarting at
another parallelism each time, and reads its output with pyarrow.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from files_helpers import write_sequence_files
from pyspark import cloudpickle

from firesteel.backends import FilesystemBackend
from firesteel.backends.inspect import read_state
from firesteel.core.errors import ConfigError
from firesteel.state import BroadcastStateDescriptor, KeyedProcessor, KeyState, stateful
from firesteel.testing import CrashHarness, Spellings, at_point
from firesteel.testing.counting import assert_exactly_once
from firesteel.testing.processors import rules_digest
from firesteel.testing.ranked import misranked, ranks_by_key
from firesteel.testing.scripts import script

cloudpickle.register_pickle_by_value(sys.modules[__name__])

READINGS = "sensor string, value double, seq long"
RULES = "sensor string, limit long, version long"
OUTPUT = "sensor string, seq long, limit long, rules string, partition long"
SENSORS = 6


def digest(entries: dict[str, int]) -> str:
    return hashlib.sha256(json.dumps(sorted(entries.items())).encode()).hexdigest()[:16]


class Limits(KeyedProcessor):
    """Keeps the latest limit per sensor in broadcast state; emits it with every reading."""

    limits = BroadcastStateDescriptor("limits", int)

    def open(self, ctx: Any) -> None:
        self.partition = ctx.partition

    def process_broadcast(self, record: dict[str, Any], ctx: Any) -> None:
        ctx.state(self.limits).put(record["sensor"], record["limit"])

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        limits = state.broadcast(self.limits)
        for seq in rows.column("seq").to_pylist():
            yield {
                "sensor": key[0],
                "seq": seq,
                "limit": limits.get(key[0], -1),
                "rules": digest(dict(limits)),
                "partition": self.partition,
            }


def _write(folder: Path, name: str, rows: list[dict[str, Any]], order: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    stamp = time.time() - 1000 + order
    os.utime(path, (stamp, stamp))


def _rules(round_: int) -> list[dict[str, Any]]:
    """Two updates of every other sensor; the later version comes first in the file and
    first in the order of the records' text, so only ``broadcast_order`` picks it."""
    rows = []
    for sensor in range(round_ % 2, SENSORS, 2):
        rows.append({"sensor": f"s{sensor}", "limit": 100 + round_, "version": 2 * round_ + 1})
        rows.append({"sensor": f"s{sensor}", "limit": 900 + round_, "version": 2 * round_})
    return rows


def _readings(round_: int) -> list[dict[str, Any]]:
    return [{"sensor": f"s{i}", "value": float(i), "seq": round_ * 100 + i} for i in range(SENSORS)]


def _run(spark: Any, root: Path, parallelism: int) -> None:
    readings = spark.readStream.schema(READINGS).option("maxFilesPerTrigger", 2)
    rules = spark.readStream.schema(RULES).option("maxFilesPerTrigger", 2)
    out = stateful(
        readings.json(str(root / "readings")),
        key=["sensor"],
        processor=Limits(),
        output_schema=OUTPUT,
        backend=FilesystemBackend(f"file://{root}/state", full_snapshot_every=2),
        name="limits",
        parallelism=parallelism,
        max_parallelism=8,
        broadcast=rules.json(str(root / "rules")),
        broadcast_order="version",
    )
    target = str(root / "out")

    def sink(batch_df: Any, batch_id: int) -> None:
        batch_df.write.mode("overwrite").parquet(f"{target}/batch={batch_id}")

    query = (
        out.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(root / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    finally:
        query.stop()


def test_broadcast_state_is_identical_in_every_partition_across_rescales(
    spark: Any, tmp_path: Path
) -> None:
    expected: dict[str, int] = {}
    order = 0
    for run, parallelism in enumerate((2, 3)):
        for round_ in (2 * run, 2 * run + 1):
            _write(tmp_path / "rules", f"rules-{round_}", _rules(round_), order)
            _write(tmp_path / "readings", f"readings-{round_}", _readings(round_), order)
            order += 1
            for rule in sorted(_rules(round_), key=lambda r: r["version"]):
                expected[rule["sensor"]] = rule["limit"]
        _run(spark, tmp_path, parallelism)
    # Readings after every rule: the last batch must see the whole map.
    _write(tmp_path / "readings", "readings-last", _readings(99), order)
    _run(spark, tmp_path, 1)

    table = ds.dataset(tmp_path / "out", format="parquet", partitioning="hive").to_table()
    rows = table.to_pylist()
    assert sorted(r["seq"] for r in rows) == sorted(
        r["seq"] for round_ in [*range(4), 99] for r in _readings(round_)
    )
    by_batch: dict[int, set[str]] = {}
    for row in rows:
        by_batch.setdefault(row["batch"], set()).add(row["rules"])
    partitions = {(row["batch"], row["partition"]) for row in rows}
    assert all(len(digests) == 1 for digests in by_batch.values()), by_batch
    assert len({p for _, p in partitions}) >= 2  # rows came from several partitions
    last = [row for row in rows if row["seq"] >= 9900]
    assert {row["rules"] for row in last} == {digest(expected)}
    assert {row["sensor"]: row["limit"] for row in last} == expected

    state = read_state(f"file://{tmp_path}/state", operator="limits").to_pandas()
    copies = state[state["state"] == "limits"]
    per_group: dict[int, dict[str, int]] = {}
    for group, user_key, value in zip(
        copies["key_group"], copies["user_key"], copies["value"], strict=True
    ):
        per_group.setdefault(int(group), {})[json.loads(user_key)] = int(value)
    assert per_group == dict.fromkeys(range(8), expected)


def test_a_broadcast_input_needs_process_broadcast(spark: Any, tmp_path: Path) -> None:
    class NoBroadcast(KeyedProcessor):
        def process(self, key: Any, rows: Any, state: KeyState) -> Any:
            return None

    readings = spark.readStream.schema(READINGS).json(str(tmp_path))
    with pytest.raises(ConfigError, match="has no process_broadcast"):
        stateful(
            readings,
            key=["sensor"],
            processor=NoBroadcast(),
            output_schema=OUTPUT,
            backend=FilesystemBackend(f"file://{tmp_path}/state"),
            broadcast=spark.readStream.schema(RULES).json(str(tmp_path)),
        )
    with pytest.raises(ConfigError, match="broadcast_order column 'nope'"):
        stateful(
            readings,
            key=["sensor"],
            processor=Limits(),
            output_schema=OUTPUT,
            backend=FilesystemBackend(f"file://{tmp_path}/state"),
            broadcast=spark.readStream.schema(RULES).json(str(tmp_path)),
            broadcast_order="nope",
        )


# -- crash test ----------------------------------------------------------------------------

FILES = 10
ROWS_PER_FILE = 8
FILES_PER_BATCH = 2
BATCHES = FILES // FILES_PER_BATCH
CRASH_PARALLELISM = (2, 3, 1, 4)
"""The operator's parallelism in each run: every restart rescales the state."""


def _rule_files(folder: Path) -> list[dict[str, int]]:
    """One rules file per batch (two versions of two rules each, the later version first);
    the broadcast map each batch must end with, computed in plain Python."""
    folder.mkdir(parents=True)
    expected: list[dict[str, int]] = []
    current: dict[str, int] = {}
    for batch in range(BATCHES):
        rows = []
        for rule in (f"r{batch % 3}", f"r{(batch + 1) % 3}"):
            rows.append({"rule": rule, "limit": 10 * batch + 1, "version": 2 * batch + 1})
            rows.append({"rule": rule, "limit": 10 * batch, "version": 2 * batch})
        pq.write_table(pa.Table.from_pylist(rows), folder / f"rules-{batch:04d}.parquet")
        for row in sorted(rows, key=lambda r: r["version"]):
            current[row["rule"]] = row["limit"]
        expected.append(dict(current))
    return expected


@pytest.mark.crash
def test_broadcast_state_survives_kills_and_rescales(
    crash_harness: CrashHarness, tmp_path: Path
) -> None:
    """Three SIGKILLs of the whole job (after a partition's snapshot, before and inside the
    sink's commit), each restart at another parallelism with the checkpoint spelled
    otherwise: every record once (read with pyarrow), ranked exactly, and every row of
    batch N, in whichever partition, saw the rules of batches 0..N applied in version
    order; at the end every key group holds that map."""
    source, rules, out = tmp_path / "in", tmp_path / "rules", tmp_path / "out"
    checkpoint, state = tmp_path / "ck", tmp_path / "state"
    expected_seqs = write_sequence_files(
        source, FILES, ROWS_PER_FILE, lambda seqs: {"key": [f"k{s % 5}" for s in seqs]}
    )
    maps = _rule_files(rules)
    checkpoints, states = Spellings(checkpoint), Spellings(state)

    def args(run: int) -> list[str]:
        return [
            str(source),
            str(rules),
            str(out),
            checkpoints(run),
            states(run),
            str(FILES_PER_BATCH),
            str(CRASH_PARALLELISM[run % len(CRASH_PARALLELISM)]),
        ]

    kills = [
        at_point("state.after_snapshot", batch=1, partition=0),
        at_point("driver.before_commit", batch=2),
        at_point("driver.mid_commit", batch=3),
    ]
    result = crash_harness.run(script("broadcast_job"), args, kills)
    context = f"\n{result.summary()}"
    assert result.all_fired, context
    assert result.exit_codes == [-9] * 3 + [0], context

    committed = ds.dataset(str(out), format="parquet").to_table()
    assert_exactly_once(committed.column("seq"), expected_seqs, what="output" + context)
    assert misranked(ranks_by_key(committed)) == 0, context
    batch_of = ROWS_PER_FILE * FILES_PER_BATCH
    wrong = [
        row
        for row in committed.to_pylist()
        if row["rules"] != rules_digest(maps[row["seq"] // batch_of])
    ]
    assert not wrong, f"{len(wrong)} rows saw another broadcast map, e.g. {wrong[:3]}{context}"
    assert len(set(committed.column("partition").to_pylist())) >= 2, context

    stored = read_state(f"file://{state}", operator="rules").to_pandas()
    copies = stored[stored["state"] == "rules"]
    per_group: dict[int, dict[str, int]] = {}
    for group, user_key, value in zip(
        copies["key_group"], copies["user_key"], copies["value"], strict=True
    ):
        per_group.setdefault(int(group), {})[json.loads(user_key)] = int(value)
    assert per_group == dict.fromkeys(range(8), maps[-1]), context
