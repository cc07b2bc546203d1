"""The storage layer's conformance on every store an emulator runs for here: S3, GCS, Azure.

The same cases on moto's S3 server, ``gcp-storage-emulator`` and Azurite
(:mod:`firesteel.testing.emulators`): a record firesteel writes is read back
whole by a client that is not firesteel's (boto3, the GCS JSON API over
``urllib``, pyarrow's own Azure client); the write-ahead log's segments, plans
and commit markers live on the store and a batch is sent once; a missing
bucket is named with the setting to fix before anything is written; a
record created once is never replaced by a second create.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from firesteel.core.context import TaskScope
from firesteel.core.durable import create_record, decode_record, write_record
from firesteel.core.errors import StorageError
from firesteel.core.storage import StorageConfig, check_location, resolve
from firesteel.sinks.committers import FileCheckpointCommitter
from firesteel.testing.emulators import AZURITE_HOST
from firesteel.testing.scripts.wal_target import JsonLinesWalSink, read_jsonl


@dataclass(frozen=True)
class Store:
    """One store as the cases see it."""

    uri: Callable[[str, str], str]
    """The URI of (bucket, key) as a user writes it."""
    settings: dict[str, str]
    setting: str
    """The setting naming the endpoint, which errors must name."""
    create_bucket: Callable[[str], str]
    read: Callable[[str, str], bytes]
    """(bucket, key) read back by the store's own client."""


@pytest.fixture(params=["s3", "gcs", "azure"])
def store(request: pytest.FixtureRequest) -> Store:
    if request.param == "s3":
        s3 = request.getfixturevalue("s3_server")
        client = s3.client()
        return Store(
            lambda bucket, key: f"s3a://{bucket}/{key}",
            s3.settings(),
            "fs.s3a.endpoint",
            s3.create_bucket,
            lambda bucket, key: client.get_object(Bucket=bucket, Key=key)["Body"].read(),
        )
    if request.param == "gcs":
        gcs = request.getfixturevalue("gcs_emulator")
        return Store(
            lambda bucket, key: f"gs://{bucket}/{key}",
            gcs.settings(),
            "fs.gs.storage.root.url",
            gcs.create_bucket,
            gcs.read,
        )
    azurite = request.getfixturevalue("azurite")
    return Store(
        lambda bucket, key: f"abfss://{bucket}@{AZURITE_HOST}/{key}",
        azurite.settings(),
        "fs.azure.endpoint",
        azurite.create_bucket,
        azurite.read,
    )


def _bucket(store: Store) -> str:
    return store.create_bucket(f"conformance-{uuid.uuid4().hex[:12]}")


def test_a_record_is_read_back_whole_by_the_stores_own_client(store: Store) -> None:
    bucket = _bucket(store)
    config = StorageConfig.of(store.settings)
    write_record(store.uri(bucket, "chk/firesteel/owner.json"), "owner", 1, {"q": 7}, config=config)
    data = store.read(bucket, "chk/firesteel/owner.json")
    assert decode_record(data, "read back", "owner", (1,)) == {"q": 7}


def test_a_created_record_is_never_replaced(store: Store) -> None:
    bucket = _bucket(store)
    config = StorageConfig.of(store.settings)
    uri = store.uri(bucket, "out/_firesteel/manifests/0.json")
    assert create_record(uri, "manifest", 1, {"files": ["a"]}, config) is True
    assert create_record(uri, "manifest", 1, {"files": ["b"]}, config) is False
    data = store.read(bucket, "out/_firesteel/manifests/0.json")
    assert decode_record(data, "read back", "manifest", (1,)) == {"files": ["a"]}


def test_the_write_ahead_log_lives_on_the_store_and_sends_each_batch_once(
    store: Store, tmp_path: Path
) -> None:
    bucket = _bucket(store)
    target = tmp_path / "target.jsonl"
    sink = JsonLinesWalSink(
        "conformance",
        store.uri(bucket, "chk/firesteel/wal"),
        FileCheckpointCommitter(store.uri(bucket, "chk/firesteel/wal-commits"), store.settings),
        str(target),
        storage_options=store.settings,
    )
    sink.prepare()
    for batch in range(3):
        votes = [
            sink.write_partition(
                TaskScope("q", batch, partition, 0),
                iter(
                    [pa.record_batch({"seq": [batch * 10 + partition * 5 + i for i in range(5)]})]
                ),
            )
            for partition in range(2)
        ]
        sink.commit_batch(batch, votes)
        sink.commit_batch(batch, votes)  # Spark may commit a batch twice: sent once
    assert sorted(int(r["seq"]) for r in read_jsonl(str(target))) == list(range(30))
    plan = store.read(bucket, "chk/firesteel/wal/conformance/plans/2.json")
    assert decode_record(plan, "plan 2", "write-ahead-plan", (3,))["batch"] == 2


def test_a_missing_bucket_is_named_with_the_setting_to_fix(store: Store) -> None:
    config = StorageConfig.of(store.settings)
    location = resolve(store.uri("no-such-bucket", "chk"), config)
    with pytest.raises(StorageError, match=rf"no-such-bucket.*does not exist.*{store.setting}"):
        check_location(location, config)
