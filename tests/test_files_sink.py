"""The transactional file sink: exactly-once end to end, bucketing, rolling, commit, recovery."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from files_helpers import rows, run_available_now, write_input

from firesteel.core.checkpoint import read_guarantee
from firesteel.core.context import TaskScope
from firesteel.core.errors import CheckpointCorruptError, ConfigError
from firesteel.core.folder import Folder
from firesteel.core.sink import CommitOutcome
from firesteel.files import committed_files, read_committed
from firesteel.files.sink import FilesSink, WriterConfig
from firesteel.files.sink.manifest import (
    FileCommittable,
    finalize,
    manifest_key,
    read_manifest,
)
from firesteel.files.sink.paths import encode_value


def make_sink(out: Path, **overrides) -> FilesSink:
    config = {
        "out": str(out),
        "sink_id": "s1",
        "format": "parquet",
        "bucket_columns": (),
        "roll_size_bytes": 1 << 30,
        "compression": None,
    }
    config.update(overrides)
    sink = FilesSink(WriterConfig(**config))
    sink.prepare()
    return sink


def vote(sink: FilesSink, batch: int, partition: int, table: pa.Table, attempt: int = 0):
    scope = TaskScope("q", batch, partition, attempt)
    return sink.write_partition(scope, iter(table.to_batches(max_chunksize=7)))


def pending_files(out: Path) -> list[Path]:
    return [p for p in (out / "_firesteel" / "pending").rglob("*") if p.is_file()]


def test_files_to_files_is_certified_exactly_once_and_commits_each_row_once(spark, tmp_path):
    for i in range(4):
        write_input(tmp_path / "in", f"f{i}.parquet", rows(i * 250, 250), "parquet")
    reader = (
        spark.readStream.format("firesteel.files")
        .option("max.files.per.batch", "2")
        .load(str(tmp_path / "in"))
    )
    query = run_available_now(
        reader,
        {
            "path": str(tmp_path / "out"),
            "checkpointLocation": str(tmp_path / "ck"),
            "guarantee": "exactly-once",
        },
    )
    assert query.exception() is None
    (record,) = read_guarantee(str(tmp_path / "ck")).values()
    assert record["achieved"] == "exactly-once" and record["required"] == "exactly-once"
    committed = read_committed(str(tmp_path / "out"))
    assert sorted(committed.column("seq").to_pylist()) == list(range(1000))
    plain = ds.dataset(str(tmp_path / "out")).to_table()
    assert sorted(plain.column("seq").to_pylist()) == list(range(1000))
    assert spark.read.parquet(str(tmp_path / "out")).count() == 1000
    assert pending_files(tmp_path / "out") == []
    assert len(committed_files(str(tmp_path / "out"))) >= 2


def test_json_sink_with_gzip(spark, tmp_path):
    write_input(tmp_path / "in", "a.parquet", rows(0, 50), "parquet")
    query = run_available_now(
        spark.readStream.format("firesteel.files").load(str(tmp_path / "in")),
        {
            "path": str(tmp_path / "out"),
            "format": "json",
            "compression": "gzip",
            "checkpointLocation": str(tmp_path / "ck"),
        },
    )
    assert query.exception() is None
    assert all(f.endswith(".json.gz") for f in committed_files(str(tmp_path / "out")))
    out = read_committed(str(tmp_path / "out"))
    assert sorted(out.column("seq").to_pylist()) == list(range(50))
    assert spark.read.json(str(tmp_path / "out")).count() == 50


MALICIOUS = ["..", ".", "", "a/b", "..\\..\\x", "%41", "k=v", "nul\x00byte", None, "../../etc"]


@pytest.mark.parametrize("value", MALICIOUS)
def test_bucket_value_encoding_never_escapes(value):
    encoded = encode_value(value)
    assert encoded not in ("", ".", "..")
    assert not any(ch in encoded for ch in "/\\=\x00")
    if value not in (None, ""):
        assert encoded != encode_value(None)


def test_bucketing_with_malicious_values_stays_inside_and_reads_back(spark, tmp_path):
    out = tmp_path / "out"
    table = pa.table({"seq": list(range(len(MALICIOUS))), "tag": MALICIOUS})
    sink = make_sink(out, bucket_columns=("tag",))
    sink.commit_batch(0, [vote(sink, 0, 0, table)])
    for path in out.rglob("*"):
        assert out.resolve() in path.resolve().parents
    data = [p for p in out.rglob("*.parquet") if "_firesteel" not in p.parts]
    assert len(data) == len(set(encode_value(v) for v in MALICIOUS))
    assert all(p.parent.parent == out for p in data), "one folder level per bucket column"
    exact = read_committed(str(out))
    assert sorted(zip(exact["seq"].to_pylist(), exact["tag"].to_pylist(), strict=True)) == sorted(
        zip(table["seq"].to_pylist(), table["tag"].to_pylist(), strict=True)
    )
    assert sorted(ds.dataset(str(out)).to_table().column("seq").to_pylist()) == list(
        range(len(MALICIOUS))
    )
    spark_rows = spark.read.parquet(str(out)).collect()
    assert sorted(r["seq"] for r in spark_rows) == list(range(len(MALICIOUS)))
    by_seq = {r["seq"]: r["tag"] for r in spark_rows}
    for seq, value in enumerate(MALICIOUS):
        # Spark reads bucket columns from folder names: it decodes our escapes, and
        # (its own convention) reads the empty string's folder as null.
        assert by_seq[seq] == (None if value == "" else value)


def test_bucketing_through_spark_by_two_columns(spark, tmp_path):
    write_input(tmp_path / "in", "a.parquet", rows(0, 60), "parquet")
    reader = spark.readStream.format("firesteel.files").load(str(tmp_path / "in"))
    query = run_available_now(
        reader.selectExpr("seq", "key", "seq % 2 AS parity"),
        {
            "path": str(tmp_path / "out"),
            "bucket.by": "key,parity",
            "checkpointLocation": str(tmp_path / "ck"),
        },
    )
    assert query.exception() is None
    folders = {
        p.parent.relative_to(tmp_path / "out").as_posix()
        for p in committed_files_paths(tmp_path / "out")
    }
    assert folders == {f"key=k{k}/parity={p}" for k in range(3) for p in range(2)}
    assert sorted(read_committed(str(tmp_path / "out")).column("seq").to_pylist()) == list(
        range(60)
    )
    assert spark.read.parquet(str(tmp_path / "out")).count() == 60


def committed_files_paths(out: Path) -> list[Path]:
    return [Path(p) for p in committed_files(str(out))]


def test_rolling_by_size(tmp_path):
    out = tmp_path / "out"
    sink = make_sink(out, roll_size_bytes=2000)
    table = pa.table({"seq": list(range(5000)), "pad": ["x" * 20] * 5000})
    scope = TaskScope("q", 0, 0, 0)
    v = sink.write_partition(scope, iter(table.to_batches(max_chunksize=500)))
    sink.commit_batch(0, [v])
    files = committed_files(str(out))
    assert len(files) >= 5
    assert sorted(read_committed(str(out)).column("seq").to_pylist()) == list(range(5000))


def test_commit_twice_and_a_reruns_handles_are_no_ops(tmp_path):
    out = tmp_path / "out"
    sink = make_sink(out)
    votes = [vote(sink, 0, 0, rows(0, 10)), vote(sink, 0, 1, rows(10, 10))]
    sink.commit_batch(0, votes)
    before = sorted(committed_files(str(out)))
    sink.commit_batch(0, votes)
    # A re-run of batch 0 (new attempt, different data split) must not publish again.
    rerun = [vote(sink, 0, 0, rows(0, 20), attempt=1)]
    sink.commit_batch(0, rerun)
    assert sorted(committed_files(str(out))) == before
    assert sorted(read_committed(str(out)).column("seq").to_pylist()) == list(range(20))
    assert sorted(ds.dataset(str(out)).to_table().column("seq").to_pylist()) == list(range(20))
    assert pending_files(out) == []


def test_the_committer_reports_each_outcome_in_the_fixed_vocabulary(tmp_path):
    from firesteel.files.sink.manifest import COMPACT_EVERY

    out = tmp_path / "out"
    sink = make_sink(out)
    first = [vote(sink, 0, 0, rows(0, 10)).committable(FileCommittable)]
    assert sink.commit(0, first) is CommitOutcome.COMMITTED
    assert sink.commit(0, first) is CommitOutcome.ALREADY_COMMITTED
    rerun = [vote(sink, 0, 0, rows(0, 20), attempt=1).committable(FileCommittable)]
    assert sink.commit(0, rerun) is CommitOutcome.ALREADY_COMMITTED
    for batch in range(1, COMPACT_EVERY):
        handles = [vote(sink, batch, 0, rows(100 * batch, 2)).committable(FileCommittable)]
        assert sink.commit(batch, handles) is CommitOutcome.COMMITTED
    compacted = [vote(sink, 0, 0, rows(0, 30), attempt=2).committable(FileCommittable)]
    assert sink.commit(0, compacted) is CommitOutcome.ALREADY_COMMITTED
    assert sorted(read_committed(str(out)).column("seq").to_pylist())[:10] == list(range(10))
    assert pending_files(out) == []


def test_recovery_rolls_a_half_renamed_batch_forward(tmp_path):
    out = tmp_path / "out"
    sink = make_sink(out)
    votes = [vote(sink, 0, p, rows(p * 10, 10)) for p in range(3)]
    handles = [v.committable(FileCommittable) for v in votes]
    # Crash simulation: the manifest is written and one rename done, then the driver dies.
    from firesteel.files.sink.manifest import Manifest, write_manifest

    files = tuple(f for h in handles for f in h.files)
    write_manifest(Folder(str(out)), Manifest("s1", 0, files))
    first = files[0]
    os.replace(out / first.pending, out / first.path)
    assert sorted(read_committed(str(out)).column("seq").to_pylist()) == list(range(30))
    assert ds.dataset(str(out)).to_table().num_rows == 10, "before recovery: partial"
    make_sink(out)  # a restarted query recovers in prepare()
    assert ds.dataset(str(out)).to_table().num_rows == 30
    assert pending_files(out) == []
    # Spark then re-runs batch 0: its handles are discarded.
    restarted = make_sink(out)
    restarted.commit_batch(0, [vote(restarted, 0, 0, rows(0, 30))])
    assert sorted(ds.dataset(str(out)).to_table().column("seq").to_pylist()) == list(range(30))


def test_finalize_is_idempotent_and_detects_lost_output(tmp_path):
    out = tmp_path / "out"
    sink = make_sink(out)
    sink.commit_batch(0, [vote(sink, 0, 0, rows(0, 5))])
    output = Folder(str(out))
    manifest = read_manifest(output, manifest_key("s1", 0))
    assert finalize(output, manifest) == 0
    Path(committed_files(str(out))[0]).unlink()
    with pytest.raises(CheckpointCorruptError, match="deleted outside firesteel"):
        finalize(output, manifest)


def test_manifest_is_checksummed(tmp_path):
    out = tmp_path / "out"
    sink = make_sink(out)
    sink.commit_batch(0, [vote(sink, 0, 0, rows(0, 5))])
    path = out / manifest_key("s1", 0)
    body = json.loads(path.read_text())
    body["content"]["files"][0]["rows"] = 999
    path.write_text(json.dumps(body))
    with pytest.raises(CheckpointCorruptError, match="checksum"):
        read_committed(str(out))


def test_leftovers_are_cleaned_up(tmp_path):
    out = tmp_path / "out"
    sink = make_sink(out)
    # A failed attempt of partition 0 in batch 0 left a file; attempt 1 succeeded.
    failed = vote(sink, 0, 0, rows(100, 5), attempt=0)
    good = vote(sink, 0, 0, rows(0, 5), attempt=1)
    assert len(pending_files(out)) == 2
    sink.commit_batch(0, [good])
    assert pending_files(out) == []
    assert sorted(read_committed(str(out)).column("seq").to_pylist()) == list(range(5))
    assert failed.committable(FileCommittable).files[0].pending not in {
        f.pending for f in good.committable(FileCommittable).files
    }
    # A crashed run left pending files of batch 1 that never got a manifest, and batch 2
    # committed since: recovery drops batch 1's leftovers but keeps the newest batch's.
    vote(sink, 1, 0, rows(200, 5))
    sink.commit_batch(2, [vote(sink, 2, 0, rows(5, 5))])
    vote(sink, 3, 0, rows(10, 5))
    make_sink(out)
    remaining = {p.parent.name for p in pending_files(out)}
    assert remaining == {"3"}
    assert sorted(read_committed(str(out)).column("seq").to_pylist()) == list(range(10))


def test_abort_discards_the_batch(tmp_path):
    out = tmp_path / "out"
    sink = make_sink(out)
    votes = [vote(sink, 0, 0, rows(0, 5))]
    sink.abort_batch(0, [*votes, None])
    assert pending_files(out) == []
    assert read_committed(str(out)).num_rows == 0


def test_unknown_sink_option_lists_valid_ones(spark, tmp_path):
    write_input(tmp_path / "in", "a.parquet", rows(0, 5), "parquet")
    query = run_available_now(
        spark.readStream.format("firesteel.files").load(str(tmp_path / "in")),
        {
            "path": str(tmp_path / "out"),
            "bucket.bi": "key",
            "checkpointLocation": str(tmp_path / "ck"),
        },
    )
    text = str(query.exception())
    assert "unknown option 'bucket.bi'" in text
    assert "Did you mean 'bucket.by'?" in text
    assert "roll.size.bytes" in text and "guarantee" in text


def test_a_misspelled_new_stream_option_is_refused():
    from firesteel.core.options import parse_options
    from firesteel.files.sink.options import FilesSinkOptions

    options = {"path": "/out", "sink.new.streams": "true"}
    with pytest.raises(ConfigError, match=r"Did you mean 'sink\.new\.stream'"):
        parse_options(FilesSinkOptions, options, connector="firesteel.files")
    parsed = parse_options(FilesSinkOptions, {"path": "/out", "sink.new.stream": "true"})
    assert parsed.sink_new_stream is True


def test_unwritable_output_path_is_a_config_error(spark, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError, match="option 'path'"):
        make_sink(blocker / "out")
    write_input(tmp_path / "in", "a.parquet", rows(0, 5), "parquet")
    query = run_available_now(
        spark.readStream.format("firesteel.files").load(str(tmp_path / "in")),
        {"path": str(blocker / "out"), "checkpointLocation": str(tmp_path / "ck")},
    )
    assert "option 'path'" in str(query.exception())
    assert "not writable" in str(query.exception())


def test_missing_checkpoint_location_is_refused(spark, tmp_path):
    write_input(tmp_path / "in", "a.parquet", rows(0, 5), "parquet")
    reader = spark.readStream.format("firesteel.files").load(str(tmp_path / "in"))
    from pyspark.errors import AnalysisException, StreamingQueryException

    # Without any checkpoint location Spark refuses the query itself.
    with pytest.raises(AnalysisException, match=r"checkpointLocation must be specified"):
        reader.writeStream.format("firesteel.files").option("path", str(tmp_path / "out")).start()
    # With only the session's checkpoint root Spark starts the query but never tells a
    # Python sink where its checkpoint is: firesteel's own ConfigError must name the option.
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "root"))
    try:
        query = (
            reader.writeStream.format("firesteel.files")
            .option("path", str(tmp_path / "out"))
            .trigger(availableNow=True)
            .start()
        )
        with pytest.raises(StreamingQueryException, match=r"ConfigError.*'checkpointLocation'"):
            query.awaitTermination(120)
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
    assert not (tmp_path / "out").exists() or read_committed(str(tmp_path / "out")).num_rows == 0
    assert not (tmp_path / "out").exists() or read_committed(str(tmp_path / "out")).num_rows == 0


def test_invalid_sink_id_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"sink\.id"):
        make_sink(tmp_path, sink_id="../evil")


def test_sink_identity_follows_the_query_not_the_path_spelling(spark, tmp_path):
    out, checkpoint = tmp_path / "out", tmp_path / "ck"

    def run(location: str) -> None:
        reader = spark.readStream.format("firesteel.files").load(str(tmp_path / "in"))
        query = run_available_now(reader, {"path": str(out), "checkpointLocation": location})
        assert query.exception() is None

    write_input(tmp_path / "in", "a.parquet", rows(0, 5), "parquet")
    run(str(checkpoint))
    # The same checkpoint spelled as a URI with a trailing slash is the same sink.
    write_input(tmp_path / "in", "b.parquet", rows(5, 5), "parquet")
    run(f"file://{checkpoint}/")
    assert sorted(read_committed(str(out)).column("seq").to_pylist()) == list(range(10))
    assert len(read_guarantee(str(checkpoint))) == 1


def test_a_recreated_checkpoint_is_refused_unless_declared_a_new_stream(spark, tmp_path):
    """The default sink id follows the output, so the same job on a deleted and recreated
    checkpoint finds its own committed batches and is refused instead of writing them again."""
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    write_input(tmp_path / "in", "a.parquet", rows(0, 5), "parquet")

    def run(**extra: str):
        reader = spark.readStream.format("firesteel.files").load(str(tmp_path / "in"))
        options = {"path": str(out), "checkpointLocation": str(checkpoint), **extra}
        return run_available_now(reader, options)

    def plain_count() -> list[int]:
        return sorted(ds.dataset(str(out)).to_table().column("seq").to_pylist())

    assert run().exception() is None
    shutil.rmtree(checkpoint)
    error = str(run().exception())
    assert "ConfigError" in error and "firesteel.files" in error and str(out) in error
    assert "'sink.new.stream'" in error
    assert plain_count() == list(range(5))
    # The user says it is a new stream: it writes (again), and its own restart is no new stream.
    shutil.rmtree(checkpoint)
    assert run(**{"sink.new.stream": "true"}).exception() is None
    assert plain_count() == sorted(list(range(5)) * 2)
    write_input(tmp_path / "in", "b.parquet", rows(5, 5), "parquet")
    assert run(**{"sink.new.stream": "true"}).exception() is None
    assert plain_count() == sorted(list(range(5)) * 2 + list(range(5, 10)))


def test_overlong_bucket_value_fails_the_task_and_leaves_the_query_restartable(spark, tmp_path):
    long_tag = "x" * 300
    table = pa.table({"seq": list(range(6)), "tag": ["a", "b", long_tag, "a", "b", "c"]})
    write_input(tmp_path / "in", "a.parquet", table, "parquet")
    options = {
        "path": str(tmp_path / "out"),
        "bucket.by": "tag",
        "checkpointLocation": str(tmp_path / "ck"),
    }

    def run(**overrides: str):
        reader = spark.readStream.format("firesteel.files").load(str(tmp_path / "in"))
        return run_available_now(reader, {**options, **overrides})

    for _ in range(2):  # the first run and a restart fail the same clear way
        error = str(run().exception())
        assert "RecordError" in error and "column 'tag'" in error and "over the filesystem" in error
        assert committed_files(str(tmp_path / "out")) == []
    # With bucketing changed the same checkpoint restarts and writes every row once.
    assert run(**{"bucket.by": "seq"}).exception() is None
    assert sorted(read_committed(str(tmp_path / "out")).column("seq").to_pylist()) == list(range(6))


def test_bucket_folder_names_are_bounded() -> None:
    from firesteel.core.errors import RecordError
    from firesteel.files.sink.paths import MAX_NAME_BYTES, bucket_dir

    fits = "é" * ((MAX_NAME_BYTES - len("tag=")) // 2)
    assert bucket_dir(("tag",), (fits,)) == f"tag={fits}"
    with pytest.raises(RecordError, match=r"column 'tag'.*256 bytes"):
        bucket_dir(("tag",), (fits + "xx",))


def test_a_sink_id_written_by_another_query_is_refused(tmp_path):
    out = tmp_path / "out"
    first = make_sink(out, sink_id="shared", query_id="query-a")
    first.commit_batch(0, [vote(first, 0, 0, rows(0, 5))])
    make_sink(out, sink_id="shared", query_id="query-a")  # its own restart
    with pytest.raises(
        ConfigError, match=r"sink 'shared' .* belongs to Spark query query-a.*'sink\.new\.stream'"
    ):
        make_sink(out, sink_id="shared", query_id="query-b")
    make_sink(out, sink_id="other", query_id="query-b")
    # An owner that never committed a batch is taken over: nothing of it to repeat or skip.
    make_sink(out, sink_id="unused", query_id="query-a")
    make_sink(out, sink_id="unused", query_id="query-b")
    make_sink(out, sink_id="unused", query_id="query-b")
    assert sorted(read_committed(str(out)).column("seq").to_pylist()) == list(range(5))


def test_two_queries_sharing_an_explicit_sink_id_through_spark(spark, tmp_path):
    out = tmp_path / "out"
    source = tmp_path / "in"
    write_input(source, "a.parquet", rows(0, 4), "parquet")
    reader = spark.readStream.format("firesteel.files").option("format", "parquet")
    options = {"path": str(out), "sink.id": "shared"}
    first = run_available_now(
        reader.load(str(source)), {**options, "checkpointLocation": str(tmp_path / "ck-a")}
    )
    assert first.exception() is None
    second = run_available_now(
        reader.option("log.path", str(tmp_path / "log-b")).load(str(source)),
        {**options, "checkpointLocation": str(tmp_path / "ck-b")},
    )
    assert "belongs to Spark query" in str(second.exception())
    assert sorted(read_committed(str(out)).column("seq").to_pylist()) == list(range(4))


def test_manifests_are_compacted_and_compacted_batches_stay_committed(tmp_path):
    from firesteel.files.sink.manifest import COMPACT_EVERY, committed_through

    out = tmp_path / "out"
    sink = make_sink(out)
    batches = 2 * COMPACT_EVERY + 5
    for batch in range(batches):
        sink.commit_batch(batch, [vote(sink, batch, 0, rows(batch * 3, 3))])
    folder = out / "_firesteel" / "manifests" / "s1"
    last_compacted = 2 * COMPACT_EVERY - 1
    assert committed_through(Folder(str(out)), "s1") == last_compacted
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f"{last_compacted}.compact.json"]
        + [f"{n}.json" for n in range(last_compacted + 1, batches)]
    )
    expected = list(range(batches * 3))
    assert sorted(read_committed(str(out)).column("seq").to_pylist()) == expected
    assert sorted(ds.dataset(str(out)).to_table().column("seq").to_pylist()) == expected
    # A re-run of a compacted batch (a checkpoint restored from an old copy) publishes nothing.
    sink.commit_batch(3, [vote(sink, 3, 0, rows(1000, 3))])
    assert pending_files(out) == []
    # Leftovers of a compacted batch are dropped when a run recovers.
    vote(sink, 4, 0, rows(2000, 3), attempt=1)
    make_sink(out)
    assert pending_files(out) == []
    assert sorted(ds.dataset(str(out)).to_table().column("seq").to_pylist()) == expected
