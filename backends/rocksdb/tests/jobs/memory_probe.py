"""Memory probe: keep state several times larger than the RocksDB budget, report resident memory.

Usage: memory_probe.py <checkpoint uri> <local dir> <keys> <budget MiB>

Runs, in this process, the tasks of an operator with one value state: four
batches write ``keys`` keys (100 random bytes each) and snapshot, a fifth
reads and rewrites 200,000 random keys. Resident memory (RSS) is sampled every
25,000 operations and at every snapshot; the baseline is taken after the
first store is open, before any state exists. Prints one JSON line:
``{"baseline_mb", "peak_mb", "state_mb", "budget_mb"}``, ``state_mb`` being
the keys and values written (the logical size of the state).
"""

from __future__ import annotations

import json
import os
import random
import sys
from typing import Any

import psutil

from firesteel.core.context import TaskScope
from firesteel.rocksdb import RocksDBBackend, RocksDBOptions
from firesteel.state import ValueStateDescriptor
from firesteel.state.backend import KeyedTask, OperatorSpec, StateDeclarations
from firesteel.state.keygroups import KeyGroupRange

VALUE = ValueStateDescriptor("payload", bytes)
MAX_P = 128
SAMPLE_EVERY = 25_000


def main() -> None:
    location, local_dir, keys_text, budget_text = sys.argv[1:5]
    keys, budget = int(keys_text), int(budget_text) << 20
    options = RocksDBOptions(memory_budget=budget)
    backend = RocksDBBackend(location, local_dir=local_dir, retain=2, options=options)
    spec = OperatorSpec("probe", ("k",), MAX_P, 1)
    process = psutil.Process()
    peak = 0

    def sample() -> None:
        nonlocal peak
        peak = max(peak, process.memory_info().rss)

    def task(batch: int) -> Any:
        return backend.open_store(
            spec,
            KeyedTask(TaskScope("probe", batch, 0, 0), KeyGroupRange(0, MAX_P - 1)),
            StateDeclarations([VALUE]),
            0,
        )

    store = task(0)
    baseline = process.memory_info().rss
    per_batch = -(-keys // 4)
    written = 0
    for batch in range(4):
        if batch:
            store = task(batch)
        for index in range(batch * per_batch, min(keys, (batch + 1) * per_batch)):
            store.set_current_key((f"key-{index:09d}",), index % MAX_P)
            store.state(VALUE).update(os.urandom(100))
            written += 1
            if written % SAMPLE_EVERY == 0:
                sample()
        store.snapshot().wait()
        sample()
    store = task(4)
    rng = random.Random(7)
    for step in range(200_000):
        index = rng.randrange(keys)
        store.set_current_key((f"key-{index:09d}",), index % MAX_P)
        state = store.state(VALUE)
        if state.value() is None:
            raise SystemExit(f"key {index} lost")
        state.update(os.urandom(100))
        if step % SAMPLE_EVERY == 0:
            sample()
    store.snapshot().wait()
    sample()
    state_bytes = keys * (100 + len(f"key-{0:09d}"))
    report = {
        "baseline_mb": baseline / 2**20,
        "peak_mb": peak / 2**20,
        "state_mb": state_bytes / 2**20,
        "budget_mb": budget / 2**20,
    }
    sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
