"""Option parsing: types, choices, unknown keys with the closest match, secrets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest

from firesteel.core.errors import ConfigError
from firesteel.core.guarantee import Guarantee
from firesteel.core.options import (
    check_ranges,
    describe_options,
    is_secret,
    option,
    parse_options,
)


@dataclass(frozen=True)
class Example:
    path: str = option(required=True, doc="where the data lives")
    format: Literal["parquet", "json"] = option("parquet", doc="file format")
    max_files_per_batch: int | None = option(None, doc="admission control")
    fraction: float = option(0.5, doc="a float")
    recursive: bool = option(False, doc="descend into folders")
    guarantee: Guarantee | None = option(None, doc="required guarantee")
    passthrough: dict[str, str] = field(default_factory=dict)


def test_types_are_converted() -> None:
    parsed = parse_options(
        Example,
        {
            "path": "/tmp/x",
            "FORMAT": "JSON",
            "max.files.per.batch": "7",
            "fraction": "0.25",
            "recursive": "true",
            "guarantee": "exactly-once",
            "checkpointLocation": "/ck",
        },
    )
    assert parsed == Example(
        path="/tmp/x",
        format="json",
        max_files_per_batch=7,
        fraction=0.25,
        recursive=True,
        guarantee=Guarantee.EXACTLY_ONCE,
    )


def test_guarantee_none_is_at_most_once_not_unset() -> None:
    # "none" selects at-most-once; only an empty value means "not set".
    chosen = parse_options(Example, {"path": "/tmp/x", "guarantee": "none"})
    unset = parse_options(Example, {"path": "/tmp/x"})
    blank = parse_options(Example, {"path": "/tmp/x", "guarantee": ""})
    assert chosen.guarantee is Guarantee.AT_MOST_ONCE
    assert unset.guarantee is None
    assert blank.guarantee is None
    # Other optional options keep reading "none" as not set.
    assert (
        parse_options(Example, {"path": "/x", "max.files.per.batch": "none"}).max_files_per_batch
        is None
    )


def test_unknown_option_lists_valid_ones_and_closest_match() -> None:
    with pytest.raises(ConfigError) as info:
        parse_options(Example, {"path": "/x", "max.file.per.batch": "3"}, connector="firesteel.t")
    text = str(info.value)
    assert text.startswith("firesteel.t: unknown option 'max.file.per.batch'")
    assert "Did you mean 'max.files.per.batch'?" in text
    assert "format, fraction, guarantee, max.files.per.batch, path, recursive" in text


def test_missing_required_option_is_named() -> None:
    with pytest.raises(ConfigError, match="option 'path' is required: where the data lives"):
        parse_options(Example, {})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("format", "orc", "'orc' is not one of parquet, json"),
        ("max.files.per.batch", "many", "expected int, got 'many'"),
        ("recursive", "yes", "expected true or false, got 'yes'"),
        ("guarantee", "twice", "unknown guarantee 'twice'"),
    ],
)
def test_bad_values_name_the_option(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_options(Example, {"path": "/x", key: value})


def test_passthrough_prefix_is_collected() -> None:
    parsed = parse_options(
        Example,
        {"path": "/x", "kafka.bootstrap.servers": "127.0.0.1:9092"},
        passthrough_prefixes=("kafka.",),
    )
    assert parsed.passthrough == {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_secret_values_are_not_echoed() -> None:
    @dataclass(frozen=True)
    class WithSecret:
        sasl_password_retries: int = option(1, doc="x")

    with pytest.raises(ConfigError) as info:
        parse_options(WithSecret, {"sasl.password.retries": "hunter2"})
    assert "hunter2" not in str(info.value)
    assert is_secret("kafka.sasl.password")
    assert not is_secret("kafka.bootstrap.servers")


def test_one_secret_rule_for_options_storage_settings_and_client_properties() -> None:
    """Words of the key mark a secret (so 'sasl' is not 'sas'); a client's allow-list makes
    every other key secret, a misspelled one included."""
    for key in ("fs.s3a.secret.key", "fs.azure.sas.token", "ssl.key.pem", "sasl.jaas.config"):
        assert is_secret(key), key
    for key in ("fs.s3a.endpoint", "sasl.mechanism", "keyspace", "path"):
        assert not is_secret(key), key
    loggable = frozenset({"bootstrap.servers"})
    assert not is_secret("bootstrap.servers", loggable)
    assert is_secret("sasl.pasword", loggable)


@dataclass(frozen=True)
class Bounded:
    retries: int = option(3, doc="attempts", min=1, max=10)
    timeout_ms: int | None = option(None, doc="a wait", min=0)

    def __post_init__(self) -> None:
        check_ranges(self, "example")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"retries": "0"}, "option 'retries' is 0; it must be between 1 and 10"),
        ({"retries": "11"}, "option 'retries' is 11; it must be between 1 and 10"),
        ({"timeout.ms": "-1"}, "option 'timeout.ms' is -1; it must be at least 0"),
    ],
)
def test_a_value_out_of_its_declared_range_is_refused_naming_the_option(
    raw: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=f"^example: {message}$"):
        parse_options(Bounded, raw)
    assert parse_options(Bounded, {"retries": "10", "timeout.ms": "0"}) == Bounded(10, 0)
    with pytest.raises(ConfigError, match="'retries' is True"):
        Bounded(retries=True)


def test_describe_lists_every_option() -> None:
    text = describe_options(Example)
    for name in ("path", "format", "max.files.per.batch", "recursive"):
        assert name in text
    assert "passthrough" not in text
