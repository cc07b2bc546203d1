"""Bad input in the file source: fail names file and line, skip counts, quarantine keeps."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from files_helpers import rows, run_available_now, write_input

from firesteel.core.error_policy import BadRecord, ErrorHandler, ErrorPolicy, FolderDeadLetter
from firesteel.core.errors import ConfigError, RecordError
from firesteel.core.options import parse_options
from firesteel.core.source import UNBOUNDED
from firesteel.files import read_committed
from firesteel.files.source import FilesSource
from firesteel.files.source.options import FilesSourceOptions

CSV_WITH_BAD_LINES = "seq,key\n1,a\n2,b\noops,c\n4,d\n5\n6,f\n"
JSON_WITH_BAD_LINES = '{"seq": 1}\n{"seq": 2}\nnot json\n{"seq": "x"}\n{"seq": 5}\n'


def make_source(folder: Path, **options: str) -> FilesSource:
    raw = {"path": str(folder), **{k.replace("_", "."): v for k, v in options.items()}}
    return FilesSource(parse_options(FilesSourceOptions, raw), pa.schema([("seq", pa.int64())]))


def read_all(source: FilesSource) -> pa.Table:
    start = source.initial_offset()
    end = source.latest_offset(start, UNBOUNDED)
    batches = [b for p in source.partitions(start, end) for b in source.read(p)]
    return pa.Table.from_batches(batches, schema=source.schema())


def test_fail_names_file_and_line(tmp_path):
    (tmp_path / "bad.csv").write_text(CSV_WITH_BAD_LINES)
    with pytest.raises(RecordError, match=r"bad\.csv line 4: .*errors"):
        read_all(make_source(tmp_path, format="csv"))


def test_fail_names_json_line(tmp_path):
    (tmp_path / "bad.json").write_text(JSON_WITH_BAD_LINES)
    with pytest.raises(RecordError, match=r"bad\.json line 3"):
        read_all(make_source(tmp_path, format="json"))


def test_skip_keeps_good_lines_in_order_and_counts(tmp_path, caplog):
    (tmp_path / "bad.csv").write_text(CSV_WITH_BAD_LINES)
    (tmp_path / "bad.json").write_text(JSON_WITH_BAD_LINES)
    csv_source = make_source(tmp_path, format="csv", errors="skip", files_pattern="*.csv")
    with caplog.at_level("WARNING"):
        table = read_all(csv_source)
    assert table.column("seq").to_pylist() == [1, 2, 4, 6]
    assert "bad.csv line 4" in caplog.text and "bad.csv line 6" in caplog.text
    assert csv_source.report_latest_offset()["skipped"] == 2
    # A replay of the same range replaces its report: counts do not double.
    read_all(make_source(tmp_path, format="csv", errors="skip", files_pattern="*.csv"))
    assert csv_source.report_latest_offset()["skipped"] == 2
    json_source = make_source(tmp_path, format="json", errors="skip", files_pattern="*.json")
    assert read_all(json_source).column("seq").to_pylist() == [1, 2, 5]
    assert json_source.report_latest_offset()["skipped"] == 2


def test_quarantine_writes_bad_lines_with_file_and_line(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "bad.csv").write_text(CSV_WITH_BAD_LINES)
    quarantine = tmp_path / "q"
    source = make_source(folder, format="csv", errors="quarantine", quarantine_path=str(quarantine))
    assert read_all(source).column("seq").to_pylist() == [1, 2, 4, 6]
    (kept,) = quarantine.glob("*.jsonl")
    records = [json.loads(line) for line in kept.read_text().splitlines()]
    assert [(r["position"], r["record"]) for r in records] == [(4, "oops,c"), (6, "5")]
    assert all(r["location"].endswith("bad.csv") and r["reason"] for r in records)
    assert source.report_latest_offset()["quarantined"] == 2
    read_all(source)
    assert len(kept.read_text().splitlines()) == 2, "a replay replaces, never duplicates"


def test_quarantine_copies_an_unreadable_file(tmp_path):
    folder = tmp_path / "in"
    write_input(folder, "good.parquet", rows(0, 3), "parquet")
    (folder / "broken.parquet").write_bytes(b"PAR1 definitely not parquet")
    quarantine = tmp_path / "q"
    source = FilesSource(
        parse_options(
            FilesSourceOptions,
            {"path": str(folder), "errors": "quarantine", "quarantine.path": str(quarantine)},
        ),
        pa.schema([("seq", pa.int64()), ("key", pa.string())]),
    )
    assert sorted(read_all(source).column("seq").to_pylist()) == [0, 1, 2]
    copies = [p.name for p in quarantine.iterdir() if p.name.endswith("broken.parquet")]
    assert len(copies) == 1
    assert source.report_latest_offset()["quarantined"] == 1


def test_quarantine_without_path_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"quarantine\.path"):
        parse_options(FilesSourceOptions, {"path": str(tmp_path), "errors": "quarantine"})


def test_text_with_invalid_utf8_lines(tmp_path):
    (tmp_path / "t.txt").write_bytes(b"one\ntwo\n\xff\xfe\nfour\n")
    source = FilesSource(
        parse_options(
            FilesSourceOptions, {"path": str(tmp_path), "format": "text", "errors": "skip"}
        )
    )
    assert read_all(source).column("value").to_pylist() == ["one", "two", "four"]
    assert source.report_latest_offset()["skipped"] == 1


def test_error_handler_policies(tmp_path):
    bad = BadRecord("topic[0]", 42, "not avro", b"\xff\x01", unit="offset")
    with pytest.raises(RecordError, match=r"topic\[0\] offset 42: not avro"):
        ErrorHandler(ErrorPolicy.FAIL, "k").handle(bad)
    skipping = ErrorHandler(ErrorPolicy.SKIP, "k")
    skipping.handle(bad)
    assert skipping.skipped == 1
    keeping = ErrorHandler(ErrorPolicy.QUARANTINE, "batch-1", FolderDeadLetter(str(tmp_path)))
    keeping.handle(bad)
    keeping.close()
    (stored,) = [json.loads(x) for x in (tmp_path / "batch-1.jsonl").read_text().splitlines()]
    assert stored["record_base64"] == "/wE=" and stored["position"] == 42


def test_spark_fail_policy_stops_the_query_naming_file_and_line(spark, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "bad.csv").write_text(CSV_WITH_BAD_LINES)
    reader = (
        spark.readStream.format("firesteel.files")
        .option("format", "csv")
        .schema("seq long, key string")
        .load(str(folder))
    )
    query = run_available_now(
        reader, {"path": str(tmp_path / "out"), "checkpointLocation": str(tmp_path / "ck")}
    )
    assert query.exception() is not None
    assert "bad.csv line 4" in str(query.exception())
    assert read_committed(str(tmp_path / "out")).num_rows == 0


def test_spark_skip_count_is_visible_in_query_progress(spark, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.csv").write_text(CSV_WITH_BAD_LINES)
    (folder / "b.csv").write_text("seq,key\n10,z\n")
    reader = (
        spark.readStream.format("firesteel.files")
        .option("format", "csv")
        .option("errors", "skip")
        .option("max.files.per.batch", "1")
        .schema("seq long, key string")
        .load(str(folder))
    )
    query = run_available_now(
        reader, {"path": str(tmp_path / "out"), "checkpointLocation": str(tmp_path / "ck")}
    )
    assert query.exception() is None
    out = read_committed(str(tmp_path / "out"))
    assert sorted(out.column("seq").to_pylist()) == [1, 2, 4, 6, 10]
    reported = json.loads(query.recentProgress[-1]["sources"][0]["latestOffset"])
    assert reported["offset"]["skipped"] == 2


def test_csv_header_unrelated_to_schema_is_bad_input(tmp_path):
    (tmp_path / "other.csv").write_text("id,name\n1,a\n")
    with pytest.raises(RecordError, match=r"other\.csv: CSV header \['id', 'name'\]"):
        read_all(make_source(tmp_path, format="csv"))


@pytest.mark.parametrize("key", ["path", "archive.path", "quarantine.path", "log.path"])
def test_relative_source_paths_are_refused(key: str) -> None:
    from firesteel.core.options import parse_options
    from firesteel.files.source.options import FilesSourceOptions

    raw = {"path": "/abs/in", "cleanup": "archive", "archive.path": "/abs/a", key: "rel/dir"}
    with pytest.raises(ConfigError, match=f"option '{key}' must be an absolute path"):
        parse_options(FilesSourceOptions, raw)


def test_relative_sink_path_is_refused_object_stores_accepted() -> None:
    from firesteel.core.options import parse_options
    from firesteel.files.sink.options import FilesSinkOptions

    with pytest.raises(ConfigError, match="option 'path' must be an absolute path"):
        parse_options(FilesSinkOptions, {"path": "out"})
    remote = parse_options(
        FilesSinkOptions,
        {"path": "s3a://bucket/out", "fs.s3a.endpoint": "http://h:9000"},
        passthrough_prefixes=("fs.",),
    )
    assert remote.passthrough == {"fs.s3a.endpoint": "http://h:9000"}
    assert parse_options(FilesSinkOptions, {"path": "/tmp/out"}).path == "/tmp/out"
    raw = {"path": "s3a://b/in", "errors": "quarantine", "quarantine.path": "s3a://b/q"}
    assert parse_options(FilesSourceOptions, raw).quarantine_path == "s3a://b/q"
