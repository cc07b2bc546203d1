"""Reading one file of each format into Arrow record batches, bad input through the error policy.

Parquet streams row groups (``ParquetFile.iter_batches``). CSV, JSON lines and
text parse the whole file with pyarrow's multi-threaded readers; only when that
fails does the reader split the file into lines and bisect: chunks that parse
are kept in order, single lines that do not become a
:class:`~firesteel.core.error_policy.BadRecord` with their 1-based line number.
The slow path costs O(bad lines x log(lines)) parses and runs only for files
with bad input.

Traps: line numbers assume records do not span lines (CSV values with
embedded newlines are reported at the chunk's first line). A Parquet file that
fails mid-way keeps the row groups read before the failure and is reported
whole (quarantine copies the whole file).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyarrow import fs

from firesteel.core.toolkit import BadRecord, ErrorHandler

JSON_BLOCK_SIZE = 16 * 1024 * 1024
"""pyarrow's JSON reader needs each line within one block; lines longer than this fail."""


@dataclass(frozen=True)
class FormatSpec:
    """How to parse files of one source (picklable: it travels with each partition)."""

    format: str
    schema: pa.Schema
    header: bool = True
    delimiter: str = ","


class FileDamaged(Exception):
    """A whole file cannot be read (internal; turned into a BadRecord by the caller)."""


def conform(table: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.Table:
    """Select, order and cast ``table``'s columns to ``schema``; missing columns become null."""
    columns = []
    for field in schema:
        if field.name in table.column_names:
            column = table.column(field.name)
            if column.type != field.type:
                column = column.cast(field.type)
            columns.append(column)
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _csv_parser(spec: FormatSpec, column_names: list[str]) -> Callable[[bytes], pa.Table]:
    import pyarrow.csv as pacsv

    types = {f.name: f.type for f in spec.schema if f.name in column_names}

    def parse(data: bytes) -> pa.Table:
        return pacsv.read_csv(
            io.BytesIO(data),
            read_options=pacsv.ReadOptions(column_names=column_names),
            parse_options=pacsv.ParseOptions(delimiter=spec.delimiter),
            convert_options=pacsv.ConvertOptions(column_types=types, strings_can_be_null=True),
        )

    return parse


def _json_parser(spec: FormatSpec) -> Callable[[bytes], pa.Table]:
    import pyarrow.json as pajson

    def parse(data: bytes) -> pa.Table:
        return pajson.read_json(
            io.BytesIO(data),
            read_options=pajson.ReadOptions(block_size=JSON_BLOCK_SIZE),
            parse_options=pajson.ParseOptions(
                explicit_schema=spec.schema, unexpected_field_behavior="ignore"
            ),
        )

    return parse


def _text_parser(spec: FormatSpec) -> Callable[[bytes], pa.Table]:
    # Here, not at the top: only the text format needs the compute kernels, and
    # importing them (~300 generated wrappers) cost every process that loads the source.
    import pyarrow.compute as pc

    name = spec.schema.names[0]

    def parse(data: bytes) -> pa.Table:
        if not data:
            return pa.table({name: pa.array([], pa.string())})
        body = data[:-1] if data.endswith(b"\n") else data
        pattern = "\r?\n" if b"\r" in body else None
        whole = pa.array([body], pa.binary())
        if pattern is None:
            lines = pc.split_pattern(whole, "\n")
        else:
            lines = pc.split_pattern_regex(whole, pattern)
        values = pc.list_flatten(lines).cast(pa.string())
        return pa.table({name: values})

    return parse


def _salvage(
    lines: list[bytes],
    first_line: int,
    parse: Callable[[bytes], pa.Table],
    location: str,
) -> Iterator[pa.Table | BadRecord]:
    """Parse ``lines`` in chunks, bisecting failing chunks down to single bad lines."""
    stack = [(0, len(lines))]
    while stack:
        low, high = stack.pop()
        chunk = b"\n".join(lines[low:high]) + b"\n"
        try:
            yield parse(chunk)
        except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeDecodeError) as exc:
            if high - low == 1:
                yield BadRecord(location, first_line + low, str(exc), lines[low])
            else:
                middle = (low + high) // 2
                stack.append((middle, high))
                stack.append((low, middle))


def _read_text_based(
    filesystem: fs.FileSystem, path: str, location: str, spec: FormatSpec, handler: ErrorHandler
) -> Iterator[pa.Table]:
    with filesystem.open_input_stream(path, compression=None) as handle:
        data = handle.read()
    first_line = 1
    if spec.format == "csv":
        if spec.header:
            head, _, data = data.partition(b"\n")
            first_line = 2
            names = _csv_header(head, spec.delimiter)
            if not set(names) & set(spec.schema.names):
                msg = (
                    f"CSV header {names} shares no column with the schema "
                    f"{spec.schema.names}; fix the header or the schema (or set header=false)"
                )
                raise FileDamaged(msg)
        else:
            names = spec.schema.names
        parse = _csv_parser(spec, names)
    elif spec.format == "json":
        parse = _json_parser(spec)
    else:
        parse = _text_parser(spec)
    try:
        table = parse(data)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        table = None
    if table is not None:
        yield table
        return
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for item in _salvage(lines, first_line, parse, location):
        if isinstance(item, BadRecord):
            handler.handle(item)
        else:
            yield item


def _csv_header(line: bytes, delimiter: str) -> list[str]:
    import pyarrow.csv as pacsv

    try:
        table = pacsv.read_csv(
            io.BytesIO(line + b"\n"),
            read_options=pacsv.ReadOptions(autogenerate_column_names=True),
            parse_options=pacsv.ParseOptions(delimiter=delimiter),
            convert_options=pacsv.ConvertOptions(
                column_types={}, strings_can_be_null=False, auto_dict_encode=False
            ),
        )
    except pa.ArrowInvalid as exc:
        msg = f"unreadable CSV header line: {exc}"
        raise FileDamaged(msg) from exc
    return [str(table.column(i)[0].as_py()) for i in range(table.num_columns)]


def read_file(
    filesystem: fs.FileSystem, path: str, location: str, spec: FormatSpec, handler: ErrorHandler
) -> Iterator[pa.RecordBatch]:
    """Yield the records of the file at ``path`` on ``filesystem`` as batches of ``spec.schema``.

    ``location`` is the name used in errors and quarantine records. Bad lines go
    to ``handler``; a file that cannot be read at all goes to it with no line.
    """
    try:
        if spec.format == "parquet":
            import pyarrow.parquet as pq

            with filesystem.open_input_file(path) as source:
                parquet = pq.ParquetFile(source)
                for batch in parquet.iter_batches(batch_size=65536):
                    yield from conform(batch, spec.schema).to_batches()
            return
        for table in _read_text_based(filesystem, path, location, spec, handler):
            yield from conform(table, spec.schema).to_batches()
    except FileDamaged as exc:
        handler.handle(BadRecord(location, None, str(exc)))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        handler.handle(BadRecord(location, None, f"cannot read as {spec.format}: {exc}"))


def infer_schema(
    filesystem: fs.FileSystem, path: str, spec_format: str, header: bool, delimiter: str
) -> pa.Schema:
    """The schema of one file on ``filesystem``, for a source without a user schema (driver)."""
    if spec_format == "text":
        return pa.schema([("value", pa.string())])
    if spec_format == "parquet":
        import pyarrow.parquet as pq

        with filesystem.open_input_file(path) as source:
            schema = pq.read_schema(source)
    elif spec_format == "csv":
        import pyarrow.csv as pacsv

        with filesystem.open_input_stream(path) as source:
            schema = pacsv.read_csv(
                source,
                read_options=pacsv.ReadOptions(autogenerate_column_names=not header),
                parse_options=pacsv.ParseOptions(delimiter=delimiter),
            ).schema
    else:
        import pyarrow.json as pajson

        with filesystem.open_input_stream(path) as source:
            schema = pajson.read_json(
                source, read_options=pajson.ReadOptions(block_size=JSON_BLOCK_SIZE)
            ).schema
    fields = [
        pa.field(f.name, pa.string()) if pa.types.is_null(f.type) else f.remove_metadata()
        for f in schema
    ]
    return pa.schema(fields)
