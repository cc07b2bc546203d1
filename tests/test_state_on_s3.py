"""Keyed state snapshotted to an S3 API server process (moto) by the filesystem backend.

The same running count as ``test_state_operator.py``, its snapshots at
``s3a://`` on the server, restarted at another parallelism; the snapshot objects
are listed with boto3, which is not firesteel's code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_state_operator import (
    RunningCount,
    expected_counts,
    latest_counts,
    readings,
    run_query,
    write_inputs,
)

from firesteel.backends import FilesystemBackend
from firesteel.backends.inspect import read_state
from firesteel.core.errors import StorageError
from firesteel.core.storage import StorageConfig
from firesteel.testing.s3 import S3Server


def test_state_on_s3_survives_a_restart_at_another_parallelism(
    spark: Any, tmp_path: Path, s3_server: S3Server
) -> None:
    bucket = s3_server.create_bucket("state-running-count")
    backend = FilesystemBackend(f"s3a://{bucket}/chk/state", storage_options=s3_server.settings())
    src = tmp_path / "in"
    first = [readings(b) for b in range(3)]
    write_inputs(src, first)
    run_query(spark, src, tmp_path, RunningCount(), parallelism=2, backend=backend)
    second = [readings(b) for b in range(3, 5)]
    write_inputs(src, second, start=1000)
    run_query(spark, src, tmp_path, RunningCount(), parallelism=3, backend=backend)
    assert latest_counts(tmp_path) == expected_counts(first + second)

    listed = s3_server.client().list_objects_v2(Bucket=bucket, Prefix="chk/state/counts/")
    names = [item["Key"] for item in listed.get("Contents", [])]
    assert "chk/state/counts/_operator.json" in names, names
    snapshots: dict[str, int] = {}
    for name in names:
        if name.endswith(".snap"):
            version = name.split("/")[-2]
            snapshots[version] = snapshots.get(version, 0) + 1
    # One object per task: two tasks wrote the first run's versions, three the second's.
    assert list(snapshots.values()) == [2, 2, 2, 3, 3], names
    state = read_state(backend.location, storage=StorageConfig.of(s3_server.settings()))
    counts = [row for row in state.to_pylist() if row["state"] == "count"]
    assert len(counts) == len(expected_counts(first + second))


def test_a_missing_bucket_is_named_before_the_query_starts(
    spark: Any, tmp_path: Path, s3_server: S3Server
) -> None:
    backend = FilesystemBackend("s3a://no-state-bucket/state", storage_options=s3_server.settings())
    write_inputs(tmp_path / "in", [readings(0)])
    with pytest.raises(StorageError, match=r"'s3a://no-state-bucket/state'.*does not exist"):
        run_query(spark, tmp_path / "in", tmp_path, RunningCount(), backend=backend)
