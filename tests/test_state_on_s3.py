"""Keyed state snapshotted to an S3 API server process (moto) by the filesystem and
RocksDB backends.

The same running count as ``test_state_operator.py``, its snapshots at
``s3a://`` on the server, restarted at another parallelism; the snapshot objects
are listed with boto3, which is not firesteel's code.
"""

from __future__ import annotations

import re
from collections import Counter
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
from firesteel.rocksdb import RocksDBBackend
from firesteel.state.backend import StateBackend
from firesteel.testing.s3 import S3Server


def _backend(kind: str, location: str, settings: dict[str, str]) -> StateBackend:
    if kind == "rocksdb":
        return RocksDBBackend(location, storage_options=settings)
    return FilesystemBackend(location, storage_options=settings)


def _objects(s3_server: S3Server, bucket: str, prefix: str) -> list[str]:
    """Every key under ``prefix``, listed with boto3 (not firesteel's code)."""
    pages = (
        s3_server.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    )
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


@pytest.mark.parametrize("kind", ["filesystem", "rocksdb"])
def test_state_on_s3_survives_a_restart_at_another_parallelism(
    spark: Any, tmp_path: Path, s3_server: S3Server, kind: str
) -> None:
    bucket = s3_server.create_bucket(f"state-running-count-{kind}")
    backend = _backend(kind, f"s3a://{bucket}/chk/state", s3_server.settings())
    src = tmp_path / "in"
    first = [readings(b) for b in range(3)]
    write_inputs(src, first)
    run_query(spark, src, tmp_path, RunningCount(), parallelism=2, backend=backend)
    second = [readings(b) for b in range(3, 5)]
    write_inputs(src, second, start=1000)
    run_query(spark, src, tmp_path, RunningCount(), parallelism=3, backend=backend)
    assert latest_counts(tmp_path) == expected_counts(first + second)

    names = _objects(s3_server, bucket, "chk/state/counts/")
    assert "chk/state/counts/_operator.json" in names, names
    # One snapshot object (filesystem) or manifest (RocksDB) per task and version: two
    # tasks wrote the first run's versions, three the second's.
    suffix = r"\.snap" if kind == "filesystem" else r"\.json"
    one_per_task = re.compile(rf"chk/state/counts/(v\d{{12}})/[^/]+{suffix}$")
    per_version = Counter(m.group(1) for m in map(one_per_task.match, names) if m)
    assert [per_version[v] for v in sorted(per_version)] == [2, 2, 2, 3, 3], names
    if kind == "rocksdb":
        assert any(name.endswith(".sst") for name in names if "/shared/" in name), names
    state = read_state(backend.location, storage=StorageConfig.of(s3_server.settings()))
    counts = [row for row in state.to_pylist() if row["state"] == "count"]
    assert len(counts) == len(expected_counts(first + second))


def test_the_sessions_hadoop_settings_reach_the_backend(
    spark: Any, tmp_path: Path, s3_server: S3Server
) -> None:
    """One configuration serves Spark and firesteel: ``spark.hadoop.fs.s3a.*`` set on the
    session, none on the backend, and its snapshots reach the server."""
    bucket = s3_server.create_bucket("state-from-session")
    settings = {f"spark.hadoop.{key}": value for key, value in s3_server.settings().items()}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        backend = RocksDBBackend(f"s3a://{bucket}/state")
        write_inputs(tmp_path / "in", [readings(0)])
        run_query(spark, tmp_path / "in", tmp_path, RunningCount(), backend=backend)
    finally:
        for key in settings:
            spark.conf.unset(key)
    assert latest_counts(tmp_path) == expected_counts([readings(0)])
    names = _objects(s3_server, bucket, "state/counts/")
    assert any(name.endswith(".json") and "/v000000000000/" in name for name in names), names


def test_a_missing_bucket_is_named_before_the_query_starts(
    spark: Any, tmp_path: Path, s3_server: S3Server
) -> None:
    backend = FilesystemBackend("s3a://no-state-bucket/state", storage_options=s3_server.settings())
    write_inputs(tmp_path / "in", [readings(0)])
    with pytest.raises(StorageError, match=r"'s3a://no-state-bucket/state'.*does not exist"):
        run_query(spark, tmp_path / "in", tmp_path, RunningCount(), backend=backend)
