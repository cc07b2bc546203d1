"""The one storage abstraction (firesteel.core.folder.Folder), the checkpoint layout defined
once (firesteel.core.layout), and the role interfaces without test hooks.

Local disk only: the same Folder is exercised on S3 by test_storage_conformance.py and
test_files_on_s3.py through every component built on it.
"""

from __future__ import annotations

import pickle
from pathlib import Path

from firesteel.core import faults, layout
from firesteel.core.folder import Folder
from firesteel.sinks.committers import FileCheckpointCommitter
from firesteel.sources.folder import SourceFolder


def test_a_folder_writes_whole_creates_once_lists_and_deletes(tmp_path: Path) -> None:
    root = Folder(f"file:{tmp_path}/root/")
    root.write("a/b.json", b"first")
    root.write("a/b.json", b"second")
    assert root.read("a/b.json") == b"second"
    assert root.create("a/c.json", b"mine") is True
    assert root.create("a/c.json", b"theirs") is False
    assert root.read("a/c.json") == b"mine"
    # No temporary file is left beside what was written.
    assert root.names("a") == ["b.json", "c.json"]

    child = root.child("a")
    assert child.uri == f"file:{tmp_path}/root/a"
    assert child.fs is root.fs
    assert root.key_of(child.path("b.json")) == "a/b.json"
    assert pickle.loads(pickle.dumps(child)).read("c.json") == b"mine"

    child.delete("b.json")
    child.delete("b.json")
    assert child.names() == ["c.json"]
    root.delete_folder("a")
    assert root.names() == []
    assert not (tmp_path / "root" / "a").exists()


def test_every_record_beside_a_checkpoint_is_under_its_firesteel_folder(tmp_path: Path) -> None:
    checkpoint = f"{tmp_path}/chk/"
    base = f"{tmp_path}/chk/firesteel"
    assert layout.records(checkpoint) == base
    assert layout.guarantee(checkpoint, "s1") == f"{base}/guarantee-s1.json"
    assert layout.guarantee_sink("guarantee-s1.json") == "s1"
    assert layout.guarantee_sink("s1.json") is None
    assert layout.metrics(checkpoint, "s1") == f"{base}/metrics/s1"
    assert layout.write_ahead_log(checkpoint) == f"{base}/wal"
    committer = FileCheckpointCommitter.for_checkpoint(checkpoint)
    assert committer.directory == layout.write_ahead_commits(checkpoint) == f"{base}/wal-commits"

    source = SourceFolder("kafka", checkpoint, "topics a,b")
    source.record_counts("0-10", skipped=2, quarantined=1)
    [folder] = Folder(base).names()
    assert source.folder.uri == f"{base}/{folder}"
    assert layout.source_connector(folder) == "kafka"
    assert source.counts() == {"skipped": 2, "quarantined": 1}


def test_the_role_interfaces_export_no_test_hooks() -> None:
    from firesteel.core import spi, toolkit

    hooks = {"FaultPoint", "fault_point", "MID_COMMIT"}
    assert not hooks & set(spi.__all__)
    assert not hooks & set(toolkit.__all__)
    assert not set(spi.__all__) & set(toolkit.__all__)
    assert faults.REGISTRY["driver.mid_commit"] is faults.MID_COMMIT
