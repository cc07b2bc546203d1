"""SASL/SSL options pass through; their secrets never show in logs, errors or progress."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from firesteel.core.errors import ConfigError
from firesteel.core.options import parse_options
from firesteel.kafka.config import client_config, consumer_config, redact, safe_error
from firesteel.kafka.options import PASSTHROUGH, KafkaSinkOptions, KafkaSourceOptions
from firesteel.testing import CrashHarness
from firesteel.testing.kafka import create_topic, produce, read_log

JOB = Path(__file__).parent / "jobs" / "secrets_job.py"


def test_security_options_reach_librdkafka_and_are_redacted():
    options = parse_options(
        KafkaSourceOptions,
        {
            "kafka.bootstrap.servers": "127.0.0.1:1",
            "subscribe": "t",
            "checkpointLocation": "/ck",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.password": "hunter2-secret",
            "kafka.ssl.key.password": "key-secret",
        },
        passthrough_prefixes=PASSTHROUGH,
    )
    config = client_config(options.passthrough)
    assert config["security.protocol"] == "SASL_SSL"
    assert config["sasl.password"] == "hunter2-secret"
    shown = str(redact(config))
    assert "hunter2-secret" not in shown and "key-secret" not in shown
    assert "SCRAM-SHA-512" in shown
    assert "hunter2-secret" not in safe_error(RuntimeError("bad hunter2-secret"), config)


def test_a_bad_secret_option_is_not_echoed():
    with pytest.raises(ConfigError) as error:
        parse_options(
            KafkaSourceOptions,
            {"kafka.bootstrap.servers": "x:1", "subscribe": "t", "sasl.password": "s3cr3t"},
            passthrough_prefixes=PASSTHROUGH,
        )
    assert "s3cr3t" not in str(error.value)
    with pytest.raises(ConfigError) as typo:
        parse_options(
            KafkaSourceOptions,
            {
                "kafka.bootstrap.servers": "x:1",
                "subscribe": "t",
                "checkpointLocation": "/ck",
                "kafka.sasl.pasword": "s3cr3t",
            },
            passthrough_prefixes=PASSTHROUGH,
        )
    assert "'kafka.sasl.pasword'" in str(typo.value) and "s3cr3t" not in str(typo.value)


def test_secrets_never_appear_in_logs_errors_or_progress(bootstrap, tmp_path):
    """The job runs through the harness (its quick-start JVM and Python workers), which
    keeps the job's stdout and stderr in its log and its temporary files in ``tmp_path``."""
    secret = f"pw-{uuid.uuid4().hex}"
    source = create_topic(bootstrap, partitions=1)
    target = create_topic(bootstrap, partitions=1)
    produce(bootstrap, source, [b"a", b"b"])
    args = [bootstrap, source, target, str(tmp_path / "ck"), secret]
    with CrashHarness(tmp_path / "harness", env={"FIRESTEEL_LOG_LEVEL": "DEBUG"}) as harness:
        result = harness.run(JOB, args)
    output = result.logs[0].read_text(errors="replace")
    assert result.exit_codes == [0], output[-3000:]
    assert "PROGRESS:" in output and "QUERY FAILED" in output, output[-3000:]
    assert sorted(read_log(bootstrap, target).values) == [b"a", b"b"]
    assert secret not in output
    logs = list(tmp_path.rglob("*"))
    for path in logs:
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path


def test_only_allow_listed_properties_reach_the_logs(caplog, monkeypatch):
    """Redaction by key name fails open; the allow-list does not: a misspelled password key
    and OAuth extensions never appear, by name or by value, in any log record."""
    import logging

    from firesteel.kafka.sink import KafkaSink, brokers

    # The logs are the subject here, not the cluster (127.0.0.1:1 answers nothing).
    monkeypatch.setattr(brokers, "reach", lambda config, patience: None)

    raw = {
        "kafka.bootstrap.servers": "127.0.0.1:1",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.oauthbearer.extensions": "logicalCluster=lkc-ext42,apiKey=ext-key-77",
        "kafka.linger.ms": "7",
        "topic": "t",
    }
    options = parse_options(KafkaSinkOptions, raw, passthrough_prefixes=PASSTHROUGH)
    with caplog.at_level(logging.DEBUG, logger="firesteel"):
        KafkaSink(options, "s").prepare()
        # A misspelled key is refused up front, and never logged on the way.
        logging.getLogger("firesteel.kafka").info(
            "typo: %s", redact(client_config({**raw, "kafka.sasl.pasword": "hunter2"}))
        )
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "SASL_SSL" in text and "OAUTHBEARER" in text and "linger.ms" in text
    assert "1 more properties" in text and "2 more properties" in text
    for leaked in ("hunter2", "pasword", "lkc-ext42", "ext-key-77", "extensions"):
        assert leaked not in text, leaked
    config = client_config({**options.passthrough, "kafka.sasl.pasword": "hunter2"})
    assert "hunter2" not in safe_error(RuntimeError("auth failed for hunter2"), config)


def test_consumers_of_the_sink_get_no_producer_properties():
    """The marker consumers are built from the sink's options; librdkafka would print a
    warning per consumer for each producer property (linger.ms spelled either way, acks)."""
    config = client_config(
        {
            "kafka.bootstrap.servers": "127.0.0.1:1",
            "kafka.linger.ms": "5",
            "kafka.queue.buffering.max.ms": "5",
            "kafka.acks": "all",
            "kafka.transactional.id": "t",
            "kafka.fetch.min.bytes": "1",
            "kafka.sasl.password": "secret",
            "kafka.reconnect.backoff.ms": "10",
        }
    )
    assert consumer_config(config) == {
        "bootstrap.servers": "127.0.0.1:1",
        "fetch.min.bytes": "1",
        "sasl.password": "secret",
        "reconnect.backoff.ms": "10",
    }
