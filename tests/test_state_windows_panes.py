"""The window operator's batch panes (:mod:`firesteel.state.panes`): an aggregate's Arrow form,
a window assigner without a vectorized ``assign_all`` and the built-in ``Min`` / ``Max`` give
what the plain-Python reference and per-record ``add`` give; the operator's ``prepare`` hook
reports a processor's mistakes. At the operator task level (no Spark), as
``tests/test_state_windows.py``.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark import cloudpickle
from test_state_backends import BACKENDS, make_backend
from test_state_event_time import BASE, MAX_P
from test_state_windows import (
    ASSIGNERS,
    BOUND_MS,
    LATE_TYPE,
    LATENESS_MS,
    MS,
    OUTPUT,
    TS,
    observed,
    out_of_order,
    reference_for,
    run_batch,
)

from firesteel.core.errors import ProcessorError
from firesteel.state import BoundedOutOfOrderness
from firesteel.state import eventtime as et
from firesteel.state.backend import OperatorSpec, StateBackend
from firesteel.state.operator import OperatorTask
from firesteel.state.processor import KeyedProcessor, KeyState
from firesteel.state.windows import (
    AggregateFunction,
    Max,
    Min,
    WindowAggregate,
    WindowAssigner,
)
from firesteel.testing.windows import CountAndSum

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@dataclass(frozen=True)
class ArrowCountAndSum(CountAndSum):
    """:class:`CountAndSum` with an Arrow form: a batch's records of a window are folded in
    one hash aggregation, then merged into the window's accumulator."""

    def arrow_aggregations(self) -> Sequence[tuple[Any, ...]]:
        return [([], "count_all"), (self.of, "sum")]

    def from_arrow(self, values: Sequence[Any]) -> list[int]:
        return [values[0], values[1] or 0]


@dataclass(frozen=True)
class FiveSeconds(WindowAssigner):
    """Tumbling 5 s windows written with ``assign`` only (the default ``assign_all``)."""

    def assign(self, ts: int) -> list[tuple[int, int]]:
        start = ts - ts % 5_000
        return [(start, start + 5_000)]


def job(
    backend: StateBackend,
    processor: KeyedProcessor,
    parallelism: int,
    schema: pa.Schema = OUTPUT,
) -> OperatorTask:
    times = et.EventTime("ts", BoundedOutOfOrderness(BOUND_MS * MS), "side-output")
    return OperatorTask(
        OperatorSpec("windows", ("k",), MAX_P, parallelism),
        processor,
        backend,
        schema,
        event_time=times,
        late_type=LATE_TYPE,
    )


@pytest.mark.parametrize(
    ("kind", "backend_kind"), list(zip(ASSIGNERS, reversed(BACKENDS), strict=True))
)
def test_the_arrow_form_matches_the_reference_across_a_rescale(
    tmp_path: Path, kind: str, backend_kind: str
) -> None:
    reference = reference_for(kind)
    backend = make_backend(backend_kind, tmp_path)
    assigner = ASSIGNERS[kind][0]
    outputs: Counter[tuple[Any, ...]] = Counter()
    for n, records in enumerate(out_of_order(seed=13)):
        processor = WindowAggregate(
            assigner, ArrowCountAndSum("v"), allowed_lateness=LATENESS_MS * MS
        )
        rows = run_batch(job(backend, processor, 3 if n < 5 else 2), n, records)
        expected = Counter(reference.batch(records))
        assert observed(rows) == expected, f"batch {n}"
        outputs.update(expected)
    assert {e[0] for e in outputs} == {"late", "window"}


def test_an_assigner_with_assign_only_windows_as_the_vectorized_one(tmp_path: Path) -> None:
    reference = reference_for("tumbling")
    backend = make_backend("heap", tmp_path)
    for n, records in enumerate(out_of_order(seed=17)):
        processor = WindowAggregate(
            FiveSeconds(), CountAndSum("v"), allowed_lateness=LATENESS_MS * MS
        )
        rows = run_batch(job(backend, processor, 2), n, records)
        assert observed(rows) == Counter(reference.batch(records)), f"batch {n}"


@dataclass(frozen=True)
class PythonOnly(AggregateFunction):
    """An aggregate's per-record path alone: its Arrow form hidden."""

    inner: AggregateFunction

    def create_accumulator(self) -> Any:
        return self.inner.create_accumulator()

    def add(self, value: dict[str, Any], accumulator: Any) -> Any:
        return self.inner.add(value, accumulator)

    def get_result(self, accumulator: Any) -> Any:
        return self.inner.get_result(accumulator)

    def merge(self, a: Any, b: Any) -> Any:
        return self.inner.merge(a, b)


@pytest.mark.parametrize("kind", list(ASSIGNERS))
@pytest.mark.parametrize("extreme", [Min("v", "value"), Max("v", "value")], ids=["min", "max"])
def test_min_and_max_agree_with_their_per_record_add(
    tmp_path: Path, kind: str, extreme: AggregateFunction
) -> None:
    schema = pa.schema([("k", pa.string()), ("window_start", TS), ("window_end", TS)])
    schema = schema.append(pa.field("value", pa.int64()))
    found = []
    for index, aggregate in enumerate([extreme, PythonOnly(extreme)]):
        backend = make_backend("heap", tmp_path / str(index))
        out: list[Any] = []
        for n, records in enumerate(out_of_order(seed=19)):
            processor = WindowAggregate(
                ASSIGNERS[kind][0], aggregate, allowed_lateness=LATENESS_MS * MS
            )
            rows = run_batch(job(backend, processor, 2, schema), n, records)
            out.extend(sorted((repr(r["k"]), repr(r["window_start"]), r["value"]) for r in rows))
        found.append(out)
    assert found[0] == found[1]
    assert any(value is not None for _, _, value in found[0])


class CountsPerKey(KeyedProcessor):
    """Counts each key's rows in ``prepare``, vectorized; ``process`` emits them."""

    def __init__(self, extra: int = 0) -> None:
        self.extra = extra

    def prepare(self, rows: pa.Table, starts: Sequence[int], state: KeyState) -> list[int]:
        ends = [*starts[1:], rows.num_rows]
        return [end - start for start, end in zip(starts, ends, strict=True)] + [0] * self.extra

    def process(self, key: tuple[Any, ...], rows: Any, state: KeyState) -> Any:
        yield {"k": key[0], "count": rows}


class Broken(CountsPerKey):
    def prepare(self, rows: pa.Table, starts: Sequence[int], state: KeyState) -> list[int]:
        raise ValueError("no")


def test_prepare_hands_process_one_item_per_key_and_its_mistakes_fail_the_task(
    tmp_path: Path,
) -> None:
    schema = pa.schema([("k", pa.string()), ("count", pa.int64())])
    records = [("a", BASE), ("b", BASE), ("a", BASE + 1), ("c", BASE), ("a", BASE)]
    rows = run_batch(job(make_backend("heap", tmp_path), CountsPerKey(), 2, schema), 0, records)
    counts = {r["k"]: r["count"] for r in rows if r.get(et.LATE_COLUMN) is None}
    assert counts == {"a": 3, "b": 1, "c": 1}
    with pytest.raises(ProcessorError, match="prepare\\(\\) raised in batch 1: ValueError: no"):
        run_batch(job(make_backend("heap", tmp_path), Broken(), 1, schema), 1, records)
    with pytest.raises(ProcessorError, match="prepare\\(\\) returned 4 items for 3 keys"):
        run_batch(job(make_backend("heap", tmp_path), CountsPerKey(1), 1, schema), 1, records)
