"""Turning what a processor returns into Arrow record batches of the declared output schema.

Accepted per call: None, an iterable of rows (dicts by column name, or
tuples/lists in schema order, or ``pyspark.sql.Row``), a ``pyarrow.Table`` or
``RecordBatch``, or a ``pandas.DataFrame``. A row with a column the schema
does not have, a missing non-nullable column, or a value that does not convert
raises :class:`OutputSchemaError` naming the operator, column, key and batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import GeneratorType
from typing import Any

import pyarrow as pa

from firesteel.core.errors import OutputSchemaError

FLUSH_ROWS = 8192


class OutputBuilder:
    """Collects a task's output rows and yields them as record batches."""

    def __init__(self, schema: pa.Schema, operator: str, batch_id: int) -> None:
        self.schema = schema
        self.operator = operator
        self.batch_id = batch_id
        self._names = list(schema.names)
        self._name_set = set(schema.names)
        self._columns: list[list[Any]] = [[] for _ in self._names]
        self._owners: list[tuple[int, Any]] = []
        """(first buffered row index, key) for each key that added rows, for error messages."""
        self._rows = 0
        self.ready: list[pa.RecordBatch] = []
        self.total_rows = 0

    def _where(self, key: Any) -> str:
        return f"operator '{self.operator}', key {key!r}, batch {self.batch_id}"

    def add(self, result: Any, key: Any) -> None:
        """Add what ``process``/``on_timer`` returned for ``key``."""
        if result is None:
            return
        if type(result) is not GeneratorType and type(result) is not list:
            self._add_other(result, key)
            return
        self._add_rows(result, key)

    def _add_other(self, result: Any, key: Any) -> None:
        if isinstance(result, pa.RecordBatch):
            result = pa.Table.from_batches([result])
        if isinstance(result, pa.Table):
            self._add_table(result, key)
            return
        if _is_pandas(result):
            self._add_table(self._from_pandas(result, key), key)
            return
        if isinstance(result, Mapping) or (
            isinstance(result, tuple) and result and not _is_row(result[0])
        ):
            msg = (
                f"{self._where(key)}: process() returned a single "
                f"{type(result).__name__}; return (or yield) an iterable of rows"
            )
            raise OutputSchemaError(msg)
        self._add_rows(result, key)

    def _add_rows(self, result: Iterable[Any], key: Any) -> None:
        self._owners.append((self._rows, key))
        columns = self._columns
        names = self._names
        width = len(names)
        for row in result:
            kind = type(row)
            if (kind is tuple or kind is list) and len(row) == width:
                # The common case first: exact built-in types skip the ABC checks below.
                for index in range(width):
                    columns[index].append(row[index])
            elif kind is dict or isinstance(row, Mapping):
                if row.keys() != self._name_set:
                    self._check_row_keys(row, key)
                for index, name in enumerate(names):
                    columns[index].append(row.get(name))
            elif hasattr(row, "asDict"):
                as_dict = row.asDict()
                if as_dict.keys() != self._name_set:
                    self._check_row_keys(as_dict, key)
                for index, name in enumerate(names):
                    columns[index].append(as_dict.get(name))
            else:
                values = tuple(row)
                if len(values) != width:
                    msg = (
                        f"{self._where(key)}: output row {values!r:.120} has {len(values)} "
                        f"values; the output schema has {width} columns ({', '.join(names)})"
                    )
                    raise OutputSchemaError(msg)
                for index in range(width):
                    columns[index].append(values[index])
            self._rows += 1
        if self._rows >= FLUSH_ROWS:
            self.flush()

    def _check_row_keys(self, row: Mapping[str, Any], key: Any) -> None:
        extra = sorted(set(row) - self._name_set)
        if extra:
            msg = (
                f"{self._where(key)}: output column '{extra[0]}' is not in the output schema "
                f"({', '.join(self._names)})"
            )
            raise OutputSchemaError(msg)
        for field in self.schema:
            if field.name not in row and not field.nullable:
                msg = f"{self._where(key)}: output row lacks non-nullable column '{field.name}'"
                raise OutputSchemaError(msg)

    def _from_pandas(self, frame: Any, key: Any) -> pa.Table:
        try:
            return pa.Table.from_pandas(frame, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            msg = f"{self._where(key)}: output DataFrame does not convert to Arrow: {exc}"
            raise OutputSchemaError(msg) from exc

    def _add_table(self, table: pa.Table, key: Any) -> None:
        extra = [name for name in table.column_names if name not in self._name_set]
        if extra:
            msg = (
                f"{self._where(key)}: output column '{extra[0]}' is not in the output schema "
                f"({', '.join(self._names)})"
            )
            raise OutputSchemaError(msg)
        arrays = []
        for field in self.schema:
            if field.name not in table.column_names:
                if not field.nullable:
                    msg = f"{self._where(key)}: output lacks non-nullable column '{field.name}'"
                    raise OutputSchemaError(msg)
                arrays.append(pa.nulls(table.num_rows, field.type))
                continue
            column = table.column(field.name)
            try:
                arrays.append(column.cast(field.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
                msg = (
                    f"{self._where(key)}: output column '{field.name}' has type {column.type}, "
                    f"which does not convert to {field.type}: {exc}"
                )
                raise OutputSchemaError(msg) from exc
        self.flush()
        for batch in pa.Table.from_arrays(arrays, schema=self.schema).to_batches():
            self.ready.append(batch)
            self.total_rows += batch.num_rows

    def flush(self) -> None:
        """Turn buffered rows into a record batch in :attr:`ready`."""
        if not self._rows:
            return
        arrays = []
        for index, field in enumerate(self.schema):
            values = self._columns[index]
            try:
                array = pa.array(values, type=field.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as exc:
                raise self._conversion_error(field, values, exc) from exc
            if not field.nullable and array.null_count:
                row = next(i for i, value in enumerate(values) if value is None)
                msg = (
                    f"{self._where(self._owner(row))}: output column '{field.name}' is "
                    "non-nullable but got None"
                )
                raise OutputSchemaError(msg)
            arrays.append(array)
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self.ready.append(batch)
        self.total_rows += batch.num_rows
        self._columns = [[] for _ in self._names]
        self._owners = []
        self._rows = 0

    def _owner(self, row: int) -> Any:
        owner = None
        for start, key in self._owners:
            if start > row:
                break
            owner = key
        return owner

    def _conversion_error(
        self, field: pa.Field, values: list[Any], exc: Exception
    ) -> OutputSchemaError:
        for row, value in enumerate(values):
            try:
                pa.array([value], type=field.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
                return OutputSchemaError(
                    f"{self._where(self._owner(row))}: output column '{field.name}' expects "
                    f"{field.type}, got {type(value).__name__} {value!r:.80}"
                )
        return OutputSchemaError(
            f"operator '{self.operator}', batch {self.batch_id}: output column "
            f"'{field.name}' does not convert to {field.type}: {exc}"
        )

    def drain(self) -> Iterator[pa.RecordBatch]:
        """Yield and forget the batches ready so far."""
        ready, self.ready = self.ready, []
        yield from ready


def _is_row(value: Any) -> bool:
    kind = type(value)
    if kind is tuple or kind is list or kind is dict:
        return True
    return isinstance(value, Mapping | tuple | list) or hasattr(value, "asDict")


def _is_pandas(value: Any) -> bool:
    module = type(value).__module__
    return module.startswith("pandas") and hasattr(value, "to_dict")
