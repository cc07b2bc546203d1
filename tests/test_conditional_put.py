"""Records created on S3 with a conditional PUT (:mod:`firesteel.core.conditional_put`).

Against moto's S3 server process, read back with boto3 and counted from the
server's request log: one request per created record, exactly one winner
among writers racing for a name, a retried PUT recognised as this writer's,
the fallback without boto3 logged, and the store's errors named with the
setting to fix. The two answers moto never gives (501 from a server without
conditional writes, 409 while another conditional write of the key is in
flight) come from botocore's own Stubber in front of the real client.
"""

from __future__ import annotations

import logging
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from botocore.stub import Stubber

from firesteel.core import conditional_put
from firesteel.core.durable import create_record, decode_record, encode_record
from firesteel.core.errors import StorageError
from firesteel.core.storage import StorageConfig, resolve
from firesteel.testing.ports import free_port
from firesteel.testing.s3 import RequestLog, S3Server

RACERS = 8
ROUNDS = 5


@pytest.fixture(autouse=True)
def _fresh_clients() -> Iterator[None]:
    conditional_put._client.cache_clear()
    conditional_put._warn_once.cache_clear()
    yield
    conditional_put._client.cache_clear()
    conditional_put._warn_once.cache_clear()


def _bucket(s3_server: S3Server) -> str:
    return s3_server.create_bucket(f"conditional-{uuid.uuid4().hex[:12]}")


def _read(s3_server: S3Server, bucket: str, key: str) -> object:
    body = s3_server.client().get_object(Bucket=bucket, Key=key)["Body"].read()
    return decode_record(body, key, "manifest", (1,))


def test_a_record_is_created_with_one_put(s3_server: S3Server) -> None:
    bucket = _bucket(s3_server)
    config = StorageConfig.of(s3_server.settings())
    log = RequestLog(s3_server, bucket)
    log.mark()
    assert create_record(f"s3a://{bucket}/out/m/0.json", "manifest", 1, ["a"], config)
    assert log.take() == Counter({"PUT": 1})
    assert not create_record(f"s3a://{bucket}/out/m/0.json", "manifest", 1, ["b"], config)
    assert _read(s3_server, bucket, "out/m/0.json") == ["a"]


def _race(uri: str, config: StorageConfig) -> dict[int, bool]:
    """:data:`RACERS` threads released at once, each creating ``uri`` with its own number."""
    start = threading.Barrier(RACERS)
    created: dict[int, bool] = {}

    def race(writer: int) -> None:
        start.wait()
        created[writer] = create_record(uri, "manifest", 1, {"writer": writer}, config)

    threads = [threading.Thread(target=race, args=(n,)) for n in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(created) == RACERS
    return created


def test_of_writers_racing_for_one_name_exactly_one_creates_it(s3_server: S3Server) -> None:
    bucket = _bucket(s3_server)
    config = StorageConfig.of(s3_server.settings())
    for round_ in range(ROUNDS):
        key = f"out/_firesteel/manifests/{round_}.json"
        created = _race(f"s3a://{bucket}/{key}", config)
        winners = [writer for writer, won in created.items() if won]
        assert len(winners) == 1, (round_, created)
        assert _read(s3_server, bucket, key) == {"writer": winners[0]}


def test_a_put_retried_after_its_answer_was_lost_counts_as_created(s3_server: S3Server) -> None:
    bucket = _bucket(s3_server)
    config = StorageConfig.of(s3_server.settings())
    location = resolve(f"s3a://{bucket}/out/m/3.json", config)
    data = encode_record("manifest", 1, ["mine"])
    # The first PUT was applied but its answer never came: the client's retry meets a 412.
    s3_server.client().put_object(Bucket=bucket, Key="out/m/3.json", Body=data)
    assert conditional_put.conditional_create(location, data, config) is True
    assert conditional_put.conditional_create(location, data + b" ", config) is False


def test_without_boto3_a_record_is_created_once_and_the_fallback_is_logged(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    bucket = _bucket(s3_server)
    config = StorageConfig.of(s3_server.settings())
    uri = f"s3a://{bucket}/chk/firesteel/owner.json"
    monkeypatch.setitem(sys.modules, "boto3", None)  # "import boto3" raises ImportError
    with caplog.at_level(logging.WARNING, logger=conditional_put.__name__):
        assert create_record(uri, "manifest", 1, ["first"], config)
        assert not create_record(uri, "manifest", 1, ["second"], config)
    monkeypatch.undo()
    assert _read(s3_server, bucket, "chk/firesteel/owner.json") == ["first"]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "boto3 is not installed" in warnings[0] and bucket in warnings[0]


def test_a_server_without_conditional_writes_falls_back(s3_server: S3Server) -> None:
    bucket = _bucket(s3_server)
    config = StorageConfig.of(s3_server.settings())
    location = resolve(f"s3a://{bucket}/out/m/1.json", config)
    with Stubber(conditional_put._client(bucket, config)) as server:
        server.add_client_error("put_object", "NotImplemented", http_status_code=501)
        assert conditional_put.conditional_create(location, b"{}", config) is None
    # create_record then takes the HEAD-then-PUT path, on the real server.
    assert create_record(f"s3a://{bucket}/out/m/1.json", "manifest", 1, ["x"], config)


def test_a_conflicting_write_in_flight_is_waited_out(s3_server: S3Server) -> None:
    bucket = _bucket(s3_server)
    config = StorageConfig.of(s3_server.settings())
    location = resolve(f"s3a://{bucket}/out/m/2.json", config)
    with Stubber(conditional_put._client(bucket, config)) as server:
        for _ in range(2):
            server.add_client_error(
                "put_object", "ConditionalRequestConflict", http_status_code=409
            )
        server.add_response("put_object", {})
        assert conditional_put.conditional_create(location, b"{}", config) is True
        server.assert_no_pending_responses()


def test_a_missing_bucket_is_named_with_the_setting_to_fix(s3_server: S3Server) -> None:
    config = StorageConfig.of(s3_server.settings())
    with pytest.raises(StorageError, match=r"no-such-bucket.*does not exist.*fs\.s3a\.endpoint"):
        create_record("s3a://no-such-bucket/out/m/0.json", "manifest", 1, [], config)


def test_an_unreachable_endpoint_is_named_with_the_setting_to_fix() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    config = StorageConfig.of(
        {
            "fs.s3a.endpoint": endpoint,
            "fs.s3a.access.key": "k",
            "fs.s3a.secret.key": "s",
            "fs.s3a.endpoint.region": "us-east-1",
            "fs.s3a.retry.timeout.ms": "1000",  # never answered: the outage window ends soon
        }
    )
    with pytest.raises(StorageError, match=rf"cannot reach endpoint {endpoint}.*fs\.s3a\.endpoint"):
        create_record("s3a://bucket/out/m/0.json", "manifest", 1, [], config)


def test_a_write_that_stays_in_conflict_is_named(s3_server: S3Server) -> None:
    bucket = _bucket(s3_server)
    config = StorageConfig.of(s3_server.settings())
    location = resolve(f"s3a://{bucket}/out/m/4.json", config)
    with Stubber(conditional_put._client(bucket, config)) as server:
        for _ in range(conditional_put.CONFLICT_RETRIES + 1):
            server.add_client_error(
                "put_object", "ConditionalRequestConflict", http_status_code=409
            )
        with pytest.raises(StorageError, match=r"out/m/4\.json.*stayed in flight through 6"):
            conditional_put.conditional_create(location, b"{}", config)
