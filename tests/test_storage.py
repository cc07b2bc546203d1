"""The storage layer (firesteel.core.storage) against a real S3 API server process.

Written through pyarrow's S3 client by firesteel, read back with boto3, which
is not firesteel's code.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyarrow import fs

from firesteel.core.durable import decode_record, encode_record, write_atomically
from firesteel.core.errors import ConfigError, StorageError
from firesteel.core.storage import StorageConfig, canonical, check_location, resolve, store_type
from firesteel.testing.ports import free_port
from firesteel.testing.s3 import S3Server


def test_spark_spellings_of_one_location_are_one_location(tmp_path: Path) -> None:
    assert canonical("s3a://bkt/chk/") == canonical("s3://bkt/chk")
    assert canonical("s3n://bkt/chk") == "s3://bkt/chk"
    assert canonical("gcs://bkt/chk") == canonical("gs://bkt/chk/")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "real", target_is_directory=True)
    assert canonical(f"file:{link}/") == canonical(str(tmp_path / "real"))


def test_an_unknown_scheme_is_refused_naming_it_and_what_works() -> None:
    with pytest.raises(ConfigError, match=r"'s4://bkt/x'.*unknown scheme 's4://'.*s3a://"):
        resolve("s4://bkt/x")
    with pytest.raises(ConfigError, match="names no bucket"):
        resolve("s3a:///x")


def test_settings_come_from_options_and_spark_and_secrets_stay_hidden() -> None:
    spark_conf = {
        "spark.hadoop.fs.s3a.endpoint": "http://spark:9000",
        "spark.hadoop.fs.s3a.secret.key": "spark-secret",
        "spark.hadoop.fs.s3a.bucket.logs.endpoint": "http://logs:9000",
        "spark.app.name": "ignored",
    }
    config = StorageConfig.of(spark_conf, {"fs.s3a.endpoint": "http://option:9000"})
    assert config.get("fs.s3a.endpoint") == "http://option:9000"
    assert config.get("fs.s3a.endpoint", bucket="logs") == "http://logs:9000"
    assert config.get("fs.s3a.secret.key") == "spark-secret"
    assert "spark-secret" not in repr(config)
    assert "spark.app.name" not in repr(config)
    with pytest.raises(ConfigError, match=r"both fs.s3a.access.key and fs.s3a.secret.key"):
        resolve("s3a://bkt/x", config)


def test_a_record_written_at_s3a_is_read_by_boto3_and_at_s3(s3_server: S3Server) -> None:
    bucket = s3_server.create_bucket("records")
    config = StorageConfig.of(s3_server.settings())
    location = resolve("s3a://records/chk/firesteel", config)
    check_location(location, config)
    assert store_type(location.filesystem) == "s3"
    record = encode_record("test-record", 1, {"batch": 7})
    write_atomically(location.filesystem, f"{location.path}/owner.json", record)

    body = s3_server.client().get_object(Bucket=bucket, Key="chk/firesteel/owner.json")["Body"]
    assert body.read() == record
    record_location = resolve("s3://records/chk/firesteel/owner.json", config)
    fsys, path = record_location.filesystem, record_location.path
    with fsys.open_input_stream(path) as stream:
        assert decode_record(stream.read(), path, "test-record", (1,)) == {"batch": 7}
    listed = fsys.get_file_info(fs.FileSelector("records/chk/firesteel"))
    assert [info.base_name for info in listed] == ["owner.json"]


def test_a_missing_bucket_is_named_with_the_setting_to_fix(s3_server: S3Server) -> None:
    config = StorageConfig.of(s3_server.settings())
    with pytest.raises(StorageError, match=r"'s3a://no-such-bucket/chk'.*bucket 'no-such-bucket'"):
        check_location(resolve("s3a://no-such-bucket/chk", config), config)


def test_an_unreachable_endpoint_fails_within_30_s_naming_it() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    config = StorageConfig.of(
        {"fs.s3a.endpoint": endpoint, "fs.s3a.access.key": "a", "fs.s3a.secret.key": "hush"}
    )
    started = time.monotonic()
    with pytest.raises(StorageError) as failure:
        check_location(resolve("s3a://bkt/chk", config), config)
    assert time.monotonic() - started < 30
    message = str(failure.value)
    assert endpoint in message
    assert "fs.s3a.endpoint" in message
    assert "'s3a://bkt/chk'" in message
    assert "hush" not in message


def test_refused_credentials_name_the_settings_not_their_values(tmp_path: Path) -> None:
    server = S3Server(tmp_path / "auth-s3", authenticate=True).start()
    try:
        config = StorageConfig.of(server.settings())
        with pytest.raises(StorageError) as failure:
            check_location(resolve("s3a://bkt/chk", config), config)
    finally:
        server.stop()
    message = str(failure.value)
    assert "fs.s3a.access.key" in message
    assert "fs.s3a.secret.key" in message
    assert server.settings()["fs.s3a.secret.key"] not in message
