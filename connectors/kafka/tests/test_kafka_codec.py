"""Value decoding without a broker: what is a row, what goes to the error policy."""

from __future__ import annotations

import io
import json

import fastavro
import pytest

from firesteel.kafka.codec import ValueDecoder

RECORD = {
    "type": "record",
    "name": "R",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
}
OPTIONAL = {
    "type": "record",
    "name": "O",
    "fields": [{"name": "id", "type": ["null", "long"]}, {"name": "n", "type": ["null", "int"]}],
}


def _avro(schema: dict, record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def _decode(decoder: ValueDecoder, values: list) -> tuple[list, dict[int, str]]:
    decoded = decoder.decode(values)
    return decoded.table.to_pylist(), dict(decoded.bad)


def test_avro_garbage_is_bad_not_a_row():
    """fastavro's schemaless reader stops after one record: b"\\x01\\x02garbage..." reads as
    id=-1, name='g' with 15 bytes left over."""
    decoder = ValueDecoder("avro", json.dumps(RECORD))
    good = _avro(RECORD, {"id": 7, "name": "seven"})
    rows, bad = _decode(decoder, [good, b"\x01\x02garbage-not-avro", good + b"x"])
    assert rows == [{"id": 7, "name": "seven"}]
    assert set(bad) == {1, 2}
    assert "15 bytes after the record" in bad[1] and "1 bytes after the record" in bad[2]


def test_avro_values_outside_the_reader_schema_are_bad():
    """A long written where the reader's schema says int decodes, but is no int."""
    ints = {"type": "record", "name": "I", "fields": [{"name": "n", "type": "int"}]}
    longs = {"type": "record", "name": "I", "fields": [{"name": "n", "type": "long"}]}
    decoder = ValueDecoder("avro", json.dumps(ints))
    rows, bad = _decode(decoder, [_avro(longs, {"n": 2**40}), _avro(ints, {"n": 3})])
    assert rows == [{"n": 3}]
    assert list(bad) == [0] and "expected int" in bad[0]


def test_a_tombstone_is_a_null_row_only_where_every_field_is_nullable():
    strict = ValueDecoder("avro", json.dumps(RECORD))
    rows, bad = _decode(strict, [None])
    assert rows == [] and "null value (a tombstone)" in bad[0] and "id, name" in bad[0]
    lenient = ValueDecoder("avro", json.dumps(OPTIONAL))
    rows, bad = _decode(lenient, [None, _avro(OPTIONAL, {"id": 1, "n": None})])
    assert rows == [{"id": None, "n": None}, {"id": 1, "n": None}] and not bad


@pytest.mark.parametrize("first", [b"null", b'{"id": 1}'])
def test_json_null_and_tombstones_are_bad_not_rows_of_nulls(first):
    decoder = ValueDecoder("json", "id BIGINT, name STRING")
    rows, bad = _decode(decoder, [first, b" null ", None, b'{"id": 2}', b"[1]"])
    expected = [{"id": 2, "name": None}]
    if first != b"null":
        expected.insert(0, {"id": 1, "name": None})
    assert rows == expected
    assert set(bad) == ({0} if first == b"null" else set()) | {1, 2, 4}
    assert "null value (a tombstone)" in bad[2] and "JSON null" in bad[1]


def test_json_fields_declared_not_nullable_must_be_present_and_not_null():
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": False, "metadata": {}},
            {"name": "name", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
    decoder = ValueDecoder("json", json.dumps(schema))
    rows, bad = _decode(decoder, [b'{"id": 1}', b'{"name": "x"}', b'{"id": null}'])
    assert rows == [{"id": 1, "name": None}] and set(bad) == {1, 2}
