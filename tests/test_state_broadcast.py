"""Broadcast state inside real Structured Streaming queries (Spark local mode, shared session).

A rules stream (JSON files: limits per rule, two versions of one rule in one
file) is the broadcast input of a keyed ranking over readings
(:class:`~firesteel.testing.processors.RankPerKeyWithRules`); every reading is
emitted with a digest of the whole broadcast map its partition held.
Restarted at parallelism 2 then 3 (rescaling the key groups
and their broadcast copies), every partition of every batch must hold the same
map, and at the end every key group's copy must equal the rules applied in
order in plain Python.

The crash test of the same kind of job (records and rules from
``firesteel.files``, the exactly-once file sink) runs with the other state
paths' in ``test_crash_together.py`` (``crash_paths.BroadcastJob``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from crash_paths import broadcast_copies
from pyspark import cloudpickle
from test_state_backends import Driver, make_backend
from test_state_operator import INPUT_SCHEMA, run_query

from firesteel.backends import FilesystemBackend
from firesteel.core.errors import ConfigError
from firesteel.state import (
    BroadcastContext,
    BroadcastMap,
    KeyedProcessor,
    KeyState,
    StateDeclarations,
    stateful,
)
from firesteel.testing.processors import RankPerKeyWithRules, rules_digest

cloudpickle.register_pickle_by_value(sys.modules[__name__])

RULES = "rule string, limit long, version long"
OUTPUT = "seq long, key string, rank long, rules string, partition long"
SENSORS = 6
MAX_P = 16


def _write(folder: Path, name: str, rows: list[dict[str, Any]], order: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    stamp = time.time() - 1000 + order
    os.utime(path, (stamp, stamp))


def _rules(round_: int) -> list[dict[str, Any]]:
    """Two updates of every other rule; the later version comes first in the file and
    first in the order of the records' text, so only ``broadcast_order`` picks it."""
    rows = []
    for rule in range(round_ % 2, SENSORS, 2):
        rows.append({"rule": f"r{rule}", "limit": 100 + round_, "version": 2 * round_ + 1})
        rows.append({"rule": f"r{rule}", "limit": 900 + round_, "version": 2 * round_})
    return rows


def _readings(round_: int) -> list[dict[str, Any]]:
    return [{"sensor": f"s{i}", "value": float(i), "seq": round_ * 100 + i} for i in range(SENSORS)]


def _run(spark: Any, root: Path, parallelism: int) -> None:
    rules = spark.readStream.schema(RULES).option("maxFilesPerTrigger", 2)
    run_query(
        spark,
        root / "readings",
        root,
        RankPerKeyWithRules(),
        parallelism=parallelism,
        schema=OUTPUT,
        backend=FilesystemBackend(f"file://{root}/state", full_snapshot_every=2),
        files_per_batch=2,
        broadcast=rules.json(str(root / "rules")),
        broadcast_order="version",
    )


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
                expected[rule["rule"]] = rule["limit"]
        if run:
            # Readings after every rule (a batch of their own): they must see the whole map.
            _write(tmp_path / "readings", "readings-last", _readings(99), order)
        _run(spark, tmp_path, parallelism)

    table = ds.dataset(tmp_path / "out", format="parquet", partitioning="hive").to_table()
    rows = table.to_pylist()
    assert sorted(r["seq"] for r in rows) == sorted(
        r["seq"] for round_ in [*range(4), 99] for r in _readings(round_)
    )
    by_batch: dict[int, set[str]] = {}
    for row in rows:
        by_batch.setdefault(row["batch"], set()).add(row["rules"])
    assert all(len(digests) == 1 for digests in by_batch.values()), by_batch
    assert len({row["partition"] for row in rows}) >= 2  # rows came from several partitions
    last = [row for row in rows if row["seq"] >= 9900]
    assert {row["rules"] for row in last} == {rules_digest(expected)}
    assert broadcast_copies(f"file://{tmp_path}/state", "counts") == dict.fromkeys(
        range(MAX_P), expected
    )


def test_a_broadcast_input_needs_process_broadcast(spark: Any, tmp_path: Path) -> None:
    class NoBroadcast(KeyedProcessor):
        def process(self, key: Any, rows: Any, state: KeyState) -> Any:
            return None

    readings = spark.readStream.schema(INPUT_SCHEMA).json(str(tmp_path))
    rules = spark.readStream.schema(RULES).json(str(tmp_path))
    for processor, order, refusal in [
        (NoBroadcast(), None, "has no process_broadcast"),
        (RankPerKeyWithRules(), "nope", "broadcast_order column 'nope'"),
    ]:
        with pytest.raises(ConfigError, match=refusal):
            stateful(
                readings,
                key=["sensor"],
                processor=processor,
                output_schema=OUTPUT,
                backend=FilesystemBackend(f"file://{tmp_path}/state"),
                broadcast=rules,
                broadcast_order=order,
            )


# -- on every backend, without Spark -------------------------------------------------------


@pytest.mark.parametrize("kind", ["heap", "filesystem", "rocksdb"])
def test_every_backend_keeps_a_full_copy_in_each_key_group(tmp_path: Path, kind: str) -> None:
    """The operator's own calls (a BroadcastContext per partition), written at parallelism 2
    and read back at 3 and 1: each partition restores the same map, after a put, a remove
    and a clear-and-refill."""
    backend = make_backend(kind, tmp_path, cache=False)
    limits = RankPerKeyWithRules.rules
    updates: list[Callable[[BroadcastMap], None]] = [
        lambda m: [m.put(f"s{i}", i) for i in range(5)],
        lambda m: m.remove("s1"),
        lambda m: (m.clear(), m.put("s9", 9)),
    ]
    expected = [{f"s{i}": i for i in range(5)}, {f"s{i}": i for i in (0, 2, 3, 4)}, {"s9": 9}]
    for batch, (update, parallelism) in enumerate(zip(updates, (2, 3, 1), strict=True)):
        driver = Driver(backend, parallelism, [limits])
        seen = []
        for partition in range(parallelism):
            task = driver.task(batch, partition)
            store = backend.open_store(driver.spec, task, StateDeclarations([limits]), 0)
            context = BroadcastContext(store, task.key_groups, batch, partition, [limits])
            before = dict(context.state(limits).items())
            update(context.state(limits))
            seen.append((before, dict(context.state(limits).items())))
            store.snapshot().wait()
        previous = expected[batch - 1] if batch else {}
        assert seen == [(previous, expected[batch])] * parallelism
