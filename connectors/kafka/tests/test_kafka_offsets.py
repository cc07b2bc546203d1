"""Offsets, admission control and options: pure logic, no broker."""

from __future__ import annotations

import re

import pytest

from firesteel.core.errors import ConfigError
from firesteel.core.options import parse_options
from firesteel.kafka.codec import json_value_schema
from firesteel.kafka.discovery import parse_partition_offsets
from firesteel.kafka.options import PASSTHROUGH, KafkaSinkOptions, KafkaSourceOptions
from firesteel.kafka.source import fair_share, from_offset, to_offset


def test_fair_share_gives_small_partitions_all_they_have_and_splits_the_rest():
    available = {("t", 0): 100, ("t", 1): 6, ("t", 2): 0, ("t", 3): 50}
    grant = fair_share(available, 60)
    assert grant == {("t", 0): 27, ("t", 1): 6, ("t", 2): 0, ("t", 3): 27}
    assert sum(fair_share(available, 1000).values()) == 156
    assert fair_share(available, 2) == {("t", 0): 1, ("t", 1): 1, ("t", 2): 0, ("t", 3): 0}


@pytest.mark.parametrize("budget", [0, 1, 7, 55, 155, 156, 10_000])
def test_fair_share_never_exceeds_budget_or_availability(budget):
    available = {("a", p): n for p, n in enumerate([5, 0, 17, 90, 43])}
    grant = fair_share(available, budget)
    assert sum(grant.values()) == min(budget, sum(available.values()))
    assert all(0 <= grant[tp] <= available[tp] for tp in available)


def test_offsets_round_trip_in_sparks_format():
    positions = {("b", 1): 7, ("a", 0): 3, ("a", 10): 5}
    offset = to_offset(positions)
    assert offset == {"a": {"0": 3, "10": 5}, "b": {"1": 7}}
    assert from_offset(offset) == positions


def test_starting_offsets_json_is_parsed_or_refused():
    assert parse_partition_offsets('{"t": {"0": 5, "1": -2}}', "startingOffsets") == {
        ("t", 0): 5,
        ("t", 1): -2,
    }
    with pytest.raises(ConfigError, match="startingOffsets"):
        parse_partition_offsets("yesterday", "startingOffsets")


def _source_options(**raw: str) -> KafkaSourceOptions:
    return parse_options(
        KafkaSourceOptions,
        {"kafka.bootstrap.servers": "x:1", "checkpointLocation": "/ck", **raw},
        passthrough_prefixes=PASSTHROUGH,
    )


def test_source_options_are_validated():
    with pytest.raises(ConfigError, match="exactly one of"):
        _source_options()
    with pytest.raises(ConfigError, match="subscribePattern"):
        _source_options(subscribePattern="(")
    with pytest.raises(ConfigError, match=r"value\.schema"):
        _source_options(subscribe="t", **{"value.format": "json"})
    with pytest.raises(ConfigError, match=r"errors\.topic"):
        _source_options(subscribe="t", errors="quarantine")
    with pytest.raises(ConfigError, match="Did you mean 'subscribe'"):
        _source_options(subscribee="t")
    with pytest.raises(ConfigError, match="bootstrap"):
        parse_options(
            KafkaSourceOptions,
            {"subscribe": "t", "checkpointLocation": "/ck"},
            passthrough_prefixes=PASSTHROUGH,
        )
    no_checkpoint = parse_options(
        KafkaSourceOptions,
        {"kafka.bootstrap.servers": "x:1", "subscribe": "t"},
        passthrough_prefixes=PASSTHROUGH,
    )
    assert no_checkpoint.checkpoint_location is None
    with pytest.raises(ConfigError, match="'checkpointLocation' must be an absolute path"):
        _source_options(subscribe="t", checkpointLocation="ck")


def test_json_value_schema_accepts_ddl_and_spark_json():
    ddl = json_value_schema("id BIGINT, price DECIMAL(10, 2), name STRING")
    assert ddl.names == ["id", "price", "name"]
    spark_json = json_value_schema(
        '{"type": "struct", "fields": [{"name": "tags", "type": {"type": "array", '
        '"elementType": "string", "containsNull": true}, "nullable": true, "metadata": {}}]}'
    )
    assert spark_json.names == ["tags"]
    with pytest.raises(ConfigError, match="unsupported type"):
        json_value_schema("id WIDGET")


def _sink_options(**raw: str) -> KafkaSinkOptions:
    return parse_options(
        KafkaSinkOptions,
        {"kafka.bootstrap.servers": "x:1", "topic": "t", **raw},
        passthrough_prefixes=PASSTHROUGH,
    )


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"kafka.compression.type": "gzp"}, "kafka.compression.type"),
        ({"kafka.acks": "most"}, "kafka.acks"),
        ({"kafka.linger.ms": "-5"}, "kafka.linger.ms"),
        ({"kafka.sasl.pasword": "hunter2"}, "kafka.sasl.pasword"),
        ({"flush.timeout.ms": "0"}, "flush.timeout.ms"),
        ({"retry.timeout.ms": "-1"}, "retry.timeout.ms"),
        ({"sink.id": "../x"}, "sink.id"),
        ({"transactional.id.prefix": "a b"}, "transactional.id.prefix"),
    ],
)
def test_sink_option_values_are_checked_up_front_naming_the_option(raw, named):
    with pytest.raises(ConfigError, match=re.escape(f"'{named}'")) as error:
        _sink_options(**raw)
    assert "hunter2" not in str(error.value)


def test_sink_options_that_conflict_with_the_guarantee_are_refused():
    with pytest.raises(ConfigError, match="acks"):
        _sink_options(guarantee="at-least-once", **{"kafka.acks": "1"})
    _sink_options(guarantee="at-most-once", **{"kafka.acks": "1", "kafka.compression.type": "zstd"})


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"kafka.isolation.level": "bogus"}, "kafka.isolation.level"),
        ({"kafka.fetch.wait.max.ms": "-1"}, "kafka.fetch.wait.max.ms"),
        ({"poll.timeout.ms": "0"}, "poll.timeout.ms"),
        ({"consume.batch.size": "0"}, "consume.batch.size"),
        ({"startingTimestamp": "-3"}, "startingTimestamp"),
    ],
)
def test_source_option_values_are_checked_up_front_naming_the_option(raw, named):
    with pytest.raises(ConfigError, match=re.escape(f"'{named}'")):
        _source_options(subscribe="t", **raw)
