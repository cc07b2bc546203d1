"""A full disk names what firesteel was doing and where: the file sink's part file, a record
written whole, a record created only if absent, on a real 1 MiB tmpfs (ENOSPC from the
kernel, no stand-in)."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from firesteel.core.context import TaskScope
from firesteel.core.durable import create_record, write_record
from firesteel.core.errors import StorageError
from firesteel.files.sink import FilesSink, WriterConfig

DISK_BYTES = 1024 * 1024


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, filled to the last byte, unmounted at teardown."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        (mount / "out").mkdir()
        (mount / "records").mkdir()
        with (mount / "filler").open("wb", buffering=0) as filler:
            try:
                while True:
                    filler.write(b"\0" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_the_file_sink_on_a_full_disk_names_the_file_it_was_writing(full_disk: Path) -> None:
    (full_disk / "filler").unlink()  # room for the sink's own folders and owner record
    sink = FilesSink(
        WriterConfig(
            out=str(full_disk / "out"),
            sink_id="s1",
            format="parquet",
            bucket_columns=(),
            roll_size_bytes=1 << 30,
            compression=None,
        )
    )
    sink.prepare()
    blobs = pa.table({"seq": range(2048), "blob": [os.urandom(1024) for _ in range(2048)]})
    with pytest.raises(StorageError) as failure:
        sink.write_partition(TaskScope("q", 0, 0, 0), iter(blobs.to_batches(max_chunksize=256)))
    assert failure.value.errno == errno.ENOSPC
    message = str(failure.value)
    assert f"cannot write {full_disk / 'out'}/_firesteel/pending/" in message, message
    assert "No space left on device" in message, message


def test_a_record_written_whole_on_a_full_disk_names_its_file(full_disk: Path) -> None:
    target = full_disk / "records" / "plan.json"
    with pytest.raises(StorageError) as failure:
        write_record(target, "plan", 1, {"rows": list(range(10_000))})
    assert failure.value.errno == errno.ENOSPC
    assert f"cannot write {full_disk / 'records'}/.plan.json." in str(failure.value)
    assert not target.exists()


def test_a_record_created_if_absent_on_a_full_disk_names_its_file(full_disk: Path) -> None:
    target = full_disk / "records" / "owner.json"
    with pytest.raises(StorageError) as failure:
        create_record(target, "owner", 1, {"query": "q" * 10_000})
    assert failure.value.errno == errno.ENOSPC
    assert f"cannot write {full_disk / 'records'}/.owner.json." in str(failure.value)
    assert sorted(p.name for p in (full_disk / "records").iterdir()) == []
