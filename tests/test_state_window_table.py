"""Tumbling and sliding windows on columns (:mod:`firesteel.state.window_table`): each key
group's windows in one state value, against the plain-Python reference through a savepoint
to another backend and parallelism and a re-run; the per-key form's state and another
aggregate's state are refused, not read as empty."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_state_backends import make_backend
from test_state_windows import (
    observed,
    out_of_order,
    reference_for,
    run_batch,
    window_job,
)
from test_state_windows_panes import ArrowCountAndSum

from firesteel.backends.inspect import read_state
from firesteel.backends.savepoint import create
from firesteel.core.errors import ConfigError
from firesteel.state.savepoint import SavepointRestore
from firesteel.state.window_table import WINDOW_TABLE
from firesteel.state.windows import Count, Sum
from firesteel.testing.windows import CountAndSum

ARROW = ArrowCountAndSum("v")


def state_names(location: str) -> Counter[str]:
    return Counter(row["state"] for row in read_state(location, "windows").to_pylist())


@pytest.mark.parametrize("kind", ["tumbling", "sliding", "session"])
def test_windows_on_columns_travel_in_a_savepoint_to_another_backend_and_parallelism(
    tmp_path: Path, kind: str
) -> None:
    batches = out_of_order(seed=23)
    reference = reference_for(kind)
    source = make_backend("filesystem", tmp_path / "source")
    for n, records in enumerate(batches[:5]):
        rows = run_batch(window_job(source, kind, 3, aggregate=ARROW), n, records)
        assert observed(rows) == Counter(reference.batch(records)), f"batch {n}"
    names = state_names(source.location)
    # One value per key group holding windows, and no per-key window state.
    assert 0 < names[WINDOW_TABLE.name] <= 6, names
    assert "windows" not in names
    create(source.location, str(tmp_path / "savepoint"), batch=4)
    target = make_backend("rocksdb", tmp_path / "target")
    restore = SavepointRestore(str(tmp_path / "savepoint"))
    outputs: Counter[tuple[Any, ...]] = Counter()
    for n, records in enumerate(batches[5:], 5):
        operator = window_job(target, kind, 2, restore=restore, aggregate=ARROW)
        expected = Counter(reference.batch(records))
        assert observed(run_batch(operator, n, records)) == expected, f"batch {n}"
        outputs.update(expected)
    assert {e[0] for e in outputs} == {"late", "window"}
    # The leap of the last batches closed every window but its own: little is left.
    assert state_names(target.location)[WINDOW_TABLE.name] <= 1


@pytest.mark.parametrize("kind", ["sliding", "session"])
def test_a_rerun_of_a_batch_on_columns_emits_the_same_windows(tmp_path: Path, kind: str) -> None:
    batches = out_of_order(seed=29)
    backend = make_backend("heap", tmp_path)
    for n, records in enumerate(batches[:7]):
        first = run_batch(window_job(backend, kind, 2, aggregate=ARROW), n, records)
    again = run_batch(window_job(backend, kind, 3, aggregate=ARROW), 6, batches[6])
    assert first
    assert observed(again) == observed(first)


def test_sessions_on_columns_match_the_reference_on_many_inputs(tmp_path: Path) -> None:
    # Which late record joins a session depends on the records before it in start order
    # (the per-key form's order): many inputs with late records that touch kept sessions,
    # new ones, or nothing.
    joined = 0
    for seed in range(12):
        reference = reference_for("session")
        backend = make_backend("heap", tmp_path / str(seed))
        for n, records in enumerate(out_of_order(seed=seed)):
            operator = window_job(backend, "session", 1 + n % 3, aggregate=ARROW)
            expected = Counter(reference.batch(records))
            assert observed(run_batch(operator, n, records)) == expected, f"seed {seed}, batch {n}"
            joined += sum(c for e, c in expected.items() if e[0] == "window")
    assert joined > 100


def test_columns_false_keeps_the_per_key_form(tmp_path: Path) -> None:
    batches = out_of_order(seed=41)
    reference = reference_for("tumbling")
    backend = make_backend("filesystem", tmp_path)
    for n, records in enumerate(batches[:6]):
        operator = window_job(backend, "tumbling", 2, aggregate=ARROW)
        processor = dataclasses.replace(operator.processor, columns=False)
        operator = dataclasses.replace(operator, processor=processor)
        expected = Counter(reference.batch(records))
        assert observed(run_batch(operator, n, records)) == expected, f"batch {n}"
    names = state_names(backend.location)
    assert names["windows"] and WINDOW_TABLE.name not in names, names


def test_the_per_key_state_is_refused_by_the_column_form_and_back(tmp_path: Path) -> None:
    batches = out_of_order(seed=31)
    per_key = make_backend("filesystem", tmp_path / "per-key")
    for n, records in enumerate(batches[:3]):
        run_batch(window_job(per_key, "tumbling", 2, aggregate=CountAndSum("v")), n, records)
    with pytest.raises(ConfigError, match=r"windows were kept per key .* columns=False"):
        run_batch(window_job(per_key, "tumbling", 2, aggregate=ARROW), 3, batches[3])
    columns = make_backend("filesystem", tmp_path / "columns")
    for n, records in enumerate(batches[:3]):
        run_batch(window_job(columns, "tumbling", 2, aggregate=ARROW), n, records)
    with pytest.raises(ConfigError, match="windows were kept on columns"):
        run_batch(window_job(columns, "tumbling", 2, aggregate=CountAndSum("v")), 3, batches[3])


def test_another_aggregate_is_refused_on_the_windows_of_the_first(tmp_path: Path) -> None:
    batches = out_of_order(seed=37)
    backend = make_backend("heap", tmp_path)
    for n, records in enumerate(batches[:3]):
        run_batch(window_job(backend, "tumbling", 2, aggregate=Count()), n, records)
    with pytest.raises(ConfigError, match=r"aggregations \[\[\[\], \"count_all\"\]\]"):
        run_batch(window_job(backend, "tumbling", 2, aggregate=Sum("v")), 3, batches[3])


def test_session_keys_of_many_columns_keep_apart_past_int64() -> None:
    # Sessions group rows by a number per key, the columns' codes multiplied together: keys
    # of 70 two-valued columns that differ only in the first one must not become one when
    # that product passes 2**64 (it would shift the first column's code out).
    import pyarrow as pa

    from firesteel.state.window_table import _key_ids

    rows = [[0] * 70, [1] + [0] * 69, [0] * 69 + [1], [1] * 70]
    table = pa.table({f"c{i}": pa.array([row[i] for row in rows]) for i in range(70)})
    assert len(set(_key_ids(table, table.column_names).tolist())) == len(rows)
