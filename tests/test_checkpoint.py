"""Reading Spark's offsets log for the guarantee check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from firesteel.core.checkpoint import read_guarantee
from firesteel.core.errors import CheckpointCorruptError, GuaranteeError
from firesteel.core.guarantee import Replay, SinkKind
from firesteel.core.sink import PlainSink
from firesteel.core.spark.offsets import source_parts
from firesteel.core.spark.writer import check_guarantee

META = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'


def write_offsets(checkpoint: Path, batch: int, lines: list[str]) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text("\n".join(["v1", META, *lines]))


def tagged(source: str, replay: str = "resettable") -> str:
    return json.dumps({"firesteel": {"source": source, "replay": replay}, "offset": {"n": 1}})


def test_latest_offsets_entry_is_read(tmp_path: Path) -> None:
    write_offsets(tmp_path, 0, ['{"0":1}'])
    write_offsets(tmp_path, 11, [tagged("firesteel.files"), "17"])
    write_offsets(tmp_path, 2, [tagged("firesteel.kafka")])
    (tmp_path / "offsets" / ".11.crc").write_text("ignored")
    parts = source_parts(str(tmp_path))
    assert [p.replay for p in parts] == [Replay.RESETTABLE, Replay.NOT_RESETTABLE]
    assert parts[0].name == "source #0 (firesteel.files)"
    assert "not a source firesteel knows, offset 17" in parts[1].name


@pytest.mark.parametrize(
    ("line", "described", "replay"),
    [
        ('{"logOffset":3}', "Spark's file source", Replay.RESETTABLE),
        (
            '{"events":{"0":5,"1":-2},"audit":{"0":0}}',
            "Kafka source on audit, events",
            Replay.RESETTABLE,
        ),
        ("0", "not a source firesteel knows", Replay.NOT_RESETTABLE),  # rate, socket, memory
        ('{"logOffset":3,"extra":1}', "not a source firesteel knows", Replay.NOT_RESETTABLE),
        ('{"events":{"zero":5}}', "not a source firesteel knows", Replay.NOT_RESETTABLE),
        ('{"events":{}}', "not a source firesteel knows", Replay.NOT_RESETTABLE),
        ("-", "not a source firesteel knows", Replay.NOT_RESETTABLE),
        ("{not json", "not a source firesteel knows", Replay.NOT_RESETTABLE),
    ],
)
def test_spark_sources_are_known_by_their_offsets(
    tmp_path: Path, line: str, described: str, replay: Replay
) -> None:
    write_offsets(tmp_path, 0, [line])
    (part,) = source_parts(str(tmp_path))
    assert described in part.name
    assert part.replay is replay


def test_no_offsets_yet_means_no_sources(tmp_path: Path) -> None:
    assert source_parts(str(tmp_path)) == []


def test_garbage_offsets_entry_is_reported_with_its_path(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text("garbage")
    with pytest.raises(CheckpointCorruptError, match=r"offsets/0"):
        source_parts(str(tmp_path))


class _Sink(PlainSink):
    name = "sink-under-test"

    def __init__(self) -> None:
        self.sink_id = "s1"

    def write(self, scope, batches):  # type: ignore[no-untyped-def]
        return 0


def test_check_records_what_the_query_runs_with(tmp_path: Path) -> None:
    from firesteel.core.guarantee import Guarantee

    write_offsets(tmp_path, 0, [tagged("firesteel.files")])
    assert check_guarantee(_Sink(), str(tmp_path), Guarantee.AT_LEAST_ONCE) is (
        Guarantee.AT_LEAST_ONCE
    )
    record = read_guarantee(str(tmp_path))["s1"]
    assert record == {
        "sink": "sink-under-test",
        "sources": ["source #0 (firesteel.files)"],
        "achieved": "at-least-once",
        "required": "at-least-once",
    }
    assert _Sink.kind is SinkKind.PLAIN
    with pytest.raises(GuaranteeError, match="plain sink"):
        check_guarantee(_Sink(), str(tmp_path), Guarantee.EXACTLY_ONCE)


def test_one_spelling_per_checkpoint(tmp_path):
    from firesteel.core.storage import canonical

    (tmp_path / "chk").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "chk")
    spellings = [
        str(tmp_path / "chk"),
        f"{tmp_path}/chk/",
        f"file://{tmp_path}/chk",
        f"file:{tmp_path}/chk/",
        str(tmp_path / "link"),
        f"{tmp_path}/other/../chk",
    ]
    assert {canonical(s) for s in spellings} == {str((tmp_path / "chk").resolve())}


def test_query_id_is_read_from_spark_metadata(tmp_path):
    from firesteel.core.checkpoint import read_query_id
    from firesteel.core.errors import CheckpointCorruptError
    from firesteel.core.spark.datasource import default_sink_id

    checkpoint = tmp_path / "chk"
    checkpoint.mkdir()
    assert read_query_id(str(checkpoint)) is None
    (checkpoint / "metadata").write_text('{"id":"6f1c-query"}\n')
    assert read_query_id(f"file://{checkpoint}/") == "6f1c-query"
    ids = {default_sink_id({"checkpointlocation": s}) for s in (str(checkpoint), f"{checkpoint}/")}
    assert len(ids) == 1
    (checkpoint / "metadata").write_text('{"id":"a-new-query"}\n')
    assert default_sink_id({"checkpointlocation": str(checkpoint)}) not in ids
    assert default_sink_id({"checkpointlocation": str(checkpoint), "sink.id": "mine"}) == "mine"
    (checkpoint / "metadata").write_text("garbage\n")
    with pytest.raises(CheckpointCorruptError, match="metadata"):
        read_query_id(str(checkpoint))


def test_the_default_sink_id_follows_the_output_across_checkpoints(tmp_path):
    from firesteel.core.checkpoint import GuaranteeRecord, write_guarantee
    from firesteel.core.errors import ConfigError
    from firesteel.core.guarantee import Guarantee
    from firesteel.core.spark.datasource import default_sink_id

    checkpoint = tmp_path / "chk"
    checkpoint.mkdir()
    options = {"checkpointlocation": str(checkpoint)}

    def sink_id(query: str, output: str = "files:/out", **kw: bool) -> str:
        (checkpoint / "metadata").write_text(json.dumps({"id": query}) + "\n")
        return default_sink_id(options, output, **kw)

    assert sink_id("q1") == sink_id("q2") != sink_id("q2", "files:/other")
    new = sink_id("q2", new_stream=True)
    assert new == sink_id("q2", new_stream=True)
    assert new not in (sink_id("q2"), sink_id("q3", new_stream=True))
    with pytest.raises(ConfigError, match=r"'sink\.id' .* 'sink\.new\.stream'"):
        default_sink_id({**options, "sink.id": "mine"}, "files:/out", new_stream=True)
    # No compatibility with ids of unreleased versions: a recorded guarantee changes nothing.
    record = GuaranteeRecord("s", [], Guarantee.EXACTLY_ONCE, None)
    write_guarantee(str(checkpoint), default_sink_id(options), record)
    assert default_sink_id(options, "files:/out") == sink_id("q2")


def test_guarantee_record_is_rewritten_only_when_it_changes(tmp_path: Path) -> None:
    from firesteel.core.checkpoint import GuaranteeRecord, write_guarantee
    from firesteel.core.guarantee import Guarantee

    record = GuaranteeRecord("s", ["source #0 (x)"], Guarantee.EXACTLY_ONCE, None)
    write_guarantee(str(tmp_path), "s1", record)
    path = tmp_path / "firesteel" / "guarantee-s1.json"
    first = path.stat().st_ino
    write_guarantee(str(tmp_path), "s1", record)
    assert path.stat().st_ino == first, "an unchanged record is not written again"
    weaker = GuaranteeRecord("s", ["source #0 (x)"], Guarantee.AT_LEAST_ONCE, None)
    write_guarantee(str(tmp_path), "s1", weaker)
    assert path.stat().st_ino != first
    assert read_guarantee(str(tmp_path))["s1"]["achieved"] == "at-least-once"
    # A durable record like every other: checksummed, so an edit or a damage is refused.
    path.write_bytes(path.read_bytes().replace(b"at-least-once", b"exactly-once"))
    with pytest.raises(CheckpointCorruptError, match=r"guarantee-s1\.json.*checksum"):
        read_guarantee(str(tmp_path))


def test_read_guarantee_refuses_a_location_that_holds_no_checkpoint(tmp_path: Path) -> None:
    from firesteel.core import CheckpointNotFoundError

    with pytest.raises(CheckpointNotFoundError, match="missing holds no Spark checkpoint"):
        read_guarantee(str(tmp_path / "missing"))
    (tmp_path / "metadata").write_text('{"id":"q"}')
    assert read_guarantee(str(tmp_path)) == {}, "a checkpoint before its first batch"
