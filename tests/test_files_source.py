"""The file source: formats, admission control, availableNow, continuous, changes, cleanup."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from files_helpers import data_batches, rows, run_available_now, write_input

from firesteel.core.errors import ConfigError, SourceChangedError
from firesteel.core.options import parse_options
from firesteel.core.source import UNBOUNDED, ReadLimit
from firesteel.files import read_committed
from firesteel.files.source import FilesSource
from firesteel.files.source.options import FilesSourceOptions


def make_source(folder: Path, **options: str) -> FilesSource:
    raw = {"path": str(folder), **{k.replace("_", "."): v for k, v in options.items()}}
    return FilesSource(parse_options(FilesSourceOptions, raw))


def read_all(source: FilesSource, start: dict, end: dict) -> pa.Table:
    batches = [b for p in source.partitions(start, end) for b in source.read(p)]
    return pa.Table.from_batches(batches, schema=source.schema())


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json", "text"])
def test_each_format_streams_every_file_in_several_batches(spark, tmp_path, fmt):
    for i in range(3):
        write_input(tmp_path / "in", f"part{i}.{fmt}", rows(i * 10, 10), fmt)
    write_input(tmp_path / "in", "_ignored.parquet", rows(1000, 5), "parquet")
    write_input(tmp_path / "in", ".hidden", rows(2000, 5), "parquet")
    reader = (
        spark.readStream.format("firesteel.files")
        .option("format", fmt)
        .option("max.files.per.batch", "1")
        .load(str(tmp_path / "in"))
    )
    query = run_available_now(
        reader,
        {"path": str(tmp_path / "out"), "checkpointLocation": str(tmp_path / "ck")},
    )
    assert query.exception() is None
    assert data_batches(query) == [10, 10, 10]
    out = read_committed(str(tmp_path / "out"))
    if fmt == "text":
        assert out.column_names == ["value"]
        values = sorted(out.column("value").to_pylist(), key=lambda v: int(v.split(",")[0]))
        assert values == [f"{s},k{s % 3}" for s in range(30)]
    else:
        assert sorted(out.column("seq").to_pylist()) == list(range(30))
        assert sorted(out.column("key").to_pylist()) == sorted(f"k{s % 3}" for s in range(30))


def test_admission_control_applies_files_and_bytes_together(tmp_path):
    sizes = []
    for i in range(6):
        path = write_input(tmp_path, f"f{i}.csv", rows(i * 100, 100), "csv")
        os.utime(path, ns=(1_000_000_000 * (i + 1), 1_000_000_000 * (i + 1)))
        sizes.append(path.stat().st_size)
    source = make_source(tmp_path, format="csv")
    start = source.initial_offset()
    by_files = source.latest_offset(start, ReadLimit(max_files=4))
    assert by_files["index"] == 4
    by_bytes = source.latest_offset(start, ReadLimit(max_bytes=sizes[0] + sizes[1] + 1))
    assert by_bytes["index"] == 2
    both = source.latest_offset(start, ReadLimit(max_files=1, max_bytes=10**9))
    assert both["index"] == 1
    tiny = source.latest_offset(start, ReadLimit(max_bytes=1))
    assert tiny["index"] == 1, "a batch always admits at least one file"
    everything = source.latest_offset(start, UNBOUNDED)
    assert everything["index"] == 6
    assert source.latest_offset(everything, UNBOUNDED) == everything
    # The same range always reads the same records, in discovery (mtime) order.
    middle = {"log": source.log_id, "index": 2}
    first = read_all(source, middle, by_files)
    again = read_all(make_source(tmp_path, format="csv"), middle, by_files)
    assert first.equals(again)
    assert first.column("seq").to_pylist() == list(range(200, 400))
    assert len(str(everything)) < 80, "offsets stay small"


def test_default_limit_comes_from_options(tmp_path):
    write_input(tmp_path, "a.parquet", rows(0, 1), "parquet")
    source = make_source(tmp_path, max_files_per_batch="2", max_bytes_per_batch="100")
    assert source.default_limit() == ReadLimit(max_files=2, max_bytes=100)


def test_available_now_stops_at_files_present_when_it_started(tmp_path):
    write_input(tmp_path, "a.parquet", rows(0, 5), "parquet")
    source = make_source(tmp_path)
    source.prepare_available_now()
    write_input(tmp_path, "b.parquet", rows(5, 5), "parquet")
    end = source.latest_offset(source.initial_offset(), UNBOUNDED)
    assert end["index"] == 1


def test_continuous_query_picks_up_new_files(spark, tmp_path):
    folder = tmp_path / "in"
    write_input(folder, "a.json", rows(0, 5), "json")
    reader = (
        spark.readStream.format("firesteel.files")
        .option("format", "json")
        .schema("seq long, key string")
        .load(str(folder))
    )
    query = (
        reader.writeStream.format("firesteel.files")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        deadline = time.time() + 120
        while read_committed(str(tmp_path / "out")).num_rows < 5 and time.time() < deadline:
            time.sleep(0.5)
        write_input(folder, "b.json", rows(5, 7), "json")
        while read_committed(str(tmp_path / "out")).num_rows < 12 and time.time() < deadline:
            time.sleep(0.5)
    finally:
        query.stop()
    assert query.exception() is None
    assert sorted(read_committed(str(tmp_path / "out")).column("seq").to_pylist()) == list(
        range(12)
    )


def test_file_changed_after_discovery_is_reported(tmp_path):
    path = write_input(tmp_path, "a.csv", rows(0, 5), "csv")
    source = make_source(tmp_path, format="csv")
    start = source.initial_offset()
    end = source.latest_offset(start, UNBOUNDED)
    (partition,) = source.partitions(start, end)
    with path.open("a") as out:
        out.write("99,k0\n")
    with pytest.raises(SourceChangedError, match=r"a\.csv changed after it was discovered"):
        list(source.read(partition))
    with pytest.raises(SourceChangedError, match=r"a\.csv changed after it was discovered"):
        source.latest_offset(end, UNBOUNDED)


def test_discovered_file_that_vanished_is_reported(tmp_path):
    path = write_input(tmp_path, "a.parquet", rows(0, 5), "parquet")
    source = make_source(tmp_path)
    start = source.initial_offset()
    end = source.latest_offset(start, UNBOUNDED)
    (partition,) = source.partitions(start, end)
    path.unlink()
    with pytest.raises(SourceChangedError, match=r"a\.parquet \(log entry 0\) is gone"):
        list(source.read(partition))


def test_offsets_survive_a_new_driver(tmp_path):
    for i in range(3):
        write_input(tmp_path, f"f{i}.parquet", rows(i * 10, 10), "parquet")
    first = make_source(tmp_path)
    end = first.latest_offset(first.initial_offset(), ReadLimit(max_files=2))
    write_input(tmp_path, "late.parquet", rows(100, 1), "parquet")
    second = make_source(tmp_path)
    table = read_all(second, second.initial_offset(), end)
    assert sorted(table.column("seq").to_pylist()) == list(range(20))


def test_a_rebuilt_discovery_log_is_not_mistaken_for_the_checkpoint_one(tmp_path):
    import shutil

    for i in range(3):
        write_input(tmp_path, f"f{i}.parquet", rows(i * 10, 10), "parquet")
    first = make_source(tmp_path)
    end = first.latest_offset(first.initial_offset(), ReadLimit(max_files=2))
    shutil.rmtree(first.log.folder.uri)
    # Rebuilt in another order: positions 0-1 of the new log would be other files.
    os.utime(tmp_path / "f0.parquet", (time.time() + 60, time.time() + 60))
    second = make_source(tmp_path)
    with pytest.raises(SourceChangedError, match=r"deleted and rebuilt.*start a new checkpoint"):
        second.latest_offset(end, ReadLimit(max_files=2))
    with pytest.raises(SourceChangedError, match="deleted and rebuilt"):
        second.partitions(second.initial_offset(), end)
    # Offsets written before logs had ids still resume.
    legacy = {"log": second.digest, "index": 1}
    assert second.latest_offset(legacy, ReadLimit(max_files=1))["index"] == 2


@pytest.mark.parametrize("mode", ["archive", "delete"])
def test_cleanup_happens_only_in_commit_and_is_idempotent(tmp_path, mode):
    folder = tmp_path / "in"
    for i in range(3):
        write_input(folder, f"f{i}.parquet", rows(i * 10, 10), "parquet")
    options = {"cleanup": mode}
    if mode == "archive":
        options["archive_path"] = str(tmp_path / "archive")
    source = make_source(folder, **options)
    start = source.initial_offset()
    end = source.latest_offset(start, ReadLimit(max_files=2))
    read_all(source, start, end)
    assert len(list(folder.glob("*.parquet"))) == 3, "reading must not clean up"
    source.commit(end)
    source.commit(end)
    assert sorted(p.name for p in folder.glob("*.parquet")) == ["f2.parquet"]
    archived = sorted(p.name for p in (tmp_path / "archive").glob("*.parquet"))
    assert archived == (["f0.parquet", "f1.parquet"] if mode == "archive" else [])
    later = make_source(folder, **options)
    final = later.latest_offset(end, UNBOUNDED)
    assert final["index"] == 3, "cleaned files are not rediscovered"
    later.commit(final)
    assert list(folder.glob("*.parquet")) == []


def test_cleanup_archive_through_spark(spark, tmp_path):
    folder = tmp_path / "in"
    for i in range(2):
        write_input(folder, f"f{i}.parquet", rows(i * 10, 10), "parquet")
    reader = (
        spark.readStream.format("firesteel.files")
        .option("cleanup", "archive")
        .option("archive.path", str(tmp_path / "archive"))
        .option("max.files.per.batch", "1")
        .load(str(folder))
    )
    query = run_available_now(
        reader, {"path": str(tmp_path / "out"), "checkpointLocation": str(tmp_path / "ck")}
    )
    assert query.exception() is None
    assert read_committed(str(tmp_path / "out")).num_rows == 20
    # Spark commits the source after the last batch only when another batch is planned,
    # so at least the first file must be archived.
    assert (tmp_path / "archive" / "f0.parquet").exists()


def test_archive_path_inside_source_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"archive\.path"):
        make_source(tmp_path, cleanup="archive", archive_path=str(tmp_path / "done"))


def test_recursive_and_pattern(tmp_path):
    write_input(tmp_path / "a", "x.csv", rows(0, 2), "csv")
    write_input(tmp_path, "y.csv", rows(2, 2), "csv")
    write_input(tmp_path, "z.txt", rows(4, 2), "csv")
    flat = make_source(tmp_path, format="csv", files_pattern="*.csv")
    end = flat.latest_offset(flat.initial_offset(), UNBOUNDED)
    assert [e.path for e in flat.log.entries[: end["index"]]] == ["y.csv"]
    deep = make_source(tmp_path, format="csv", files_pattern="*.csv", recursive="true")
    end = deep.latest_offset(deep.initial_offset(), UNBOUNDED)
    assert sorted(e.path for e in deep.log.entries) == ["a/x.csv", "y.csv"]


def test_missing_folder_and_no_schema_errors(tmp_path):
    with pytest.raises(ConfigError, match="'path'"):
        make_source(tmp_path / "nope")
    with pytest.raises(ConfigError, match=r"\.schema\("):
        make_source(tmp_path, format="json").schema()


def test_unknown_source_option_names_closest_match(tmp_path):
    with pytest.raises(ConfigError, match=r"Did you mean 'max\.files\.per\.batch'"):
        parse_options(FilesSourceOptions, {"path": str(tmp_path), "max.file.per.batch": "1"})
