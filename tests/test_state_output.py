"""Processor output -> Arrow batches of the declared schema, and the errors naming the column."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

from firesteel.core.errors import OutputSchemaError
from firesteel.state.output import OutputBuilder

SCHEMA = pa.schema(
    [pa.field("sensor", pa.string(), nullable=False), ("count", pa.int64()), ("mean", pa.float64())]
)


def build(*results: object) -> pa.Table:
    builder = OutputBuilder(SCHEMA, "op", 7)
    for index, result in enumerate(results):
        builder.add(result, (f"k{index}",))
    builder.flush()
    return pa.Table.from_batches(list(builder.drain()), schema=SCHEMA)


def test_every_accepted_shape_becomes_the_schema() -> None:
    table = build(
        [{"sensor": "a", "count": 1, "mean": 1.0}],
        (("b", 2, 2.0),),
        None,
        pa.table({"mean": [3.0], "sensor": ["c"], "count": pa.array([3], pa.int32())}),
        pd.DataFrame({"sensor": ["d"], "count": [4], "mean": [4.0]}),
        ({"sensor": "e", "count": 5, "mean": None} for _ in range(1)),
    )
    assert table.schema == SCHEMA
    assert table.column("sensor").to_pylist() == ["a", "b", "c", "d", "e"]
    assert table.column("count").to_pylist() == [1, 2, 3, 4, 5]


def test_wrong_type_names_column_key_and_batch() -> None:
    with pytest.raises(
        OutputSchemaError,
        match=r"operator 'op', key \('k1',\), batch 7: output column 'count' expects int64, "
        r"got str 'many'",
    ):
        build([{"sensor": "a", "count": 1, "mean": 1.0}], [{"sensor": "b", "count": "many"}])


def test_unknown_column_is_refused() -> None:
    with pytest.raises(OutputSchemaError, match="output column 'cuont' is not in the output"):
        build([{"sensor": "a", "cuont": 1}])


def test_missing_non_nullable_column_is_refused() -> None:
    with pytest.raises(OutputSchemaError, match="lacks non-nullable column 'sensor'"):
        build([{"count": 1}])
    with pytest.raises(OutputSchemaError, match="lacks non-nullable column 'sensor'"):
        build(pa.table({"count": [1]}))


def test_single_row_instead_of_rows_is_explained() -> None:
    with pytest.raises(OutputSchemaError, match="returned a single dict"):
        build({"sensor": "a", "count": 1, "mean": 1.0})
    with pytest.raises(OutputSchemaError, match="returned a single tuple"):
        build(("a", 1, 1.0))


def test_tuple_rows_need_every_column() -> None:
    with pytest.raises(OutputSchemaError, match="has 2 values; the output schema has 3 columns"):
        build([("a", 1)])


def test_arrow_column_that_cannot_cast_is_named() -> None:
    with pytest.raises(OutputSchemaError, match="output column 'mean' has type string"):
        build(pa.table({"sensor": ["a"], "mean": ["x"]}))
