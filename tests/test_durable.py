"""The one durable-write helper: whole files or none, never a temporary left behind."""

from __future__ import annotations

import pytest
from pyarrow import fs

from firesteel.core.durable import atomic_output, write_atomically


def test_write_replaces_whole_and_leaves_no_temporary(tmp_path):
    local = fs.LocalFileSystem()
    target = f"{tmp_path}/record.json"
    write_atomically(local, target, b"first")
    write_atomically(local, target, b"second")
    assert (tmp_path / "record.json").read_bytes() == b"second"
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path):
    local = fs.LocalFileSystem()
    target = f"{tmp_path}/record.json"
    write_atomically(local, target, b"committed")

    class Interrupted(Exception):
        pass

    with pytest.raises(Interrupted), atomic_output(local, target) as out:
        out.write(b"half of a new")
        raise Interrupted
    assert (tmp_path / "record.json").read_bytes() == b"committed"
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_works_through_a_uri_filesystem(tmp_path):
    fsys, base = fs.FileSystem.from_uri(f"file://{tmp_path}")
    write_atomically(fsys, f"{base}/a.bin", b"x" * 10, sync=False)
    assert (tmp_path / "a.bin").read_bytes() == b"x" * 10
