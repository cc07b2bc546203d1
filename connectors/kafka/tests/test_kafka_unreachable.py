"""No broker answers: the source and the sinks fail within 30 s, naming the bootstrap servers
and the option that set them."""

from __future__ import annotations

import time

import pytest

from firesteel.core.errors import FiresteelError
from firesteel.core.options import parse_options
from firesteel.kafka.options import PASSTHROUGH, KafkaSinkOptions
from firesteel.kafka.sink import KafkaExactlyOnceSink, KafkaSink
from firesteel.testing.kafka import free_port

WITHIN = 30.0


def test_the_source_names_the_unreachable_servers_within_30_s(spark, tmp_path):
    servers = f"127.0.0.1:{free_port()}"
    began = time.monotonic()
    query = (
        spark.readStream.format("firesteel.kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", "events")
        .option("startingOffsets", "earliest")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .load()
        .writeStream.format("memory")
        .queryName("unreachable")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    with pytest.raises(Exception) as failure:
        query.awaitTermination(120)
    elapsed = time.monotonic() - began
    assert "option 'kafka.bootstrap.servers'" in str(failure.value)
    assert servers in str(failure.value)
    assert elapsed < WITHIN, f"failed after {elapsed:.1f} s"


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_the_sinks_name_the_unreachable_servers_within_30_s(guarantee):
    servers = f"127.0.0.1:{free_port()}"
    raw = {"kafka.bootstrap.servers": servers, "topic": "events", "guarantee": guarantee}
    options = parse_options(KafkaSinkOptions, raw, passthrough_prefixes=PASSTHROUGH)
    sink = (
        KafkaExactlyOnceSink(options, "s")
        if guarantee == "exactly-once"
        else KafkaSink(options, "s")
    )
    began = time.monotonic()
    with pytest.raises(FiresteelError, match=rf"option 'kafka.bootstrap.servers' \({servers}\)"):
        sink.prepare()
    elapsed = time.monotonic() - began
    assert elapsed < WITHIN, f"failed after {elapsed:.1f} s"
