"""librdkafka client configuration: ``kafka.*`` options in, redacted text out.

Every ``kafka.<key>`` option is handed to librdkafka as ``<key>`` unchanged
(SASL, SSL, timeouts, compression...). Secrets among them (passwords, keys,
JAAS configs, tokens, OAuth extensions) must never reach a log, an exception or
query progress. Recognising secrets by their key name fails open (a typo such
as ``sasl.pasword``, or ``sasl.oauthbearer.extensions``), so logs show only the
properties on an allow-list of keys known to be safe (:data:`LOGGABLE_KEYS`),
names and values, and nothing of the rest but their count; error texts have
the value of every property off that list scrubbed out. Everything firesteel
prints about a client goes through :func:`redact` or :func:`safe_error`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Literal

from firesteel.core.spi import ConfigError
from firesteel.core.toolkit import is_secret

PREFIX = "kafka."

REDACTED = "<redacted>"

LOGGABLE_KEYS = frozenset(
    {
        "acks",
        "allow.auto.create.topics",
        "api.version.request",
        "auto.offset.reset",
        "batch.num.messages",
        "batch.size",
        "bootstrap.servers",
        "broker.address.family",
        "check.crcs",
        "client.id",
        "client.rack",
        "compression.codec",
        "compression.level",
        "compression.type",
        "delivery.report.only.error",
        "delivery.timeout.ms",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "enable.idempotence",
        "enable.partition.eof",
        "fetch.max.bytes",
        "fetch.min.bytes",
        "fetch.wait.max.ms",
        "group.id",
        "isolation.level",
        "linger.ms",
        "max.in.flight.requests.per.connection",
        "max.poll.interval.ms",
        "message.max.bytes",
        "message.send.max.retries",
        "message.timeout.ms",
        "metadata.max.age.ms",
        "partitioner",
        "queue.buffering.max.kbytes",
        "queue.buffering.max.messages",
        "queue.buffering.max.ms",
        "receive.message.max.bytes",
        "reconnect.backoff.max.ms",
        "reconnect.backoff.ms",
        "request.timeout.ms",
        "retries",
        "retry.backoff.max.ms",
        "retry.backoff.ms",
        "sasl.mechanism",
        "sasl.mechanisms",
        "security.protocol",
        "session.timeout.ms",
        "socket.keepalive.enable",
        "socket.timeout.ms",
        "statistics.interval.ms",
        "topic.metadata.refresh.interval.ms",
        "transaction.timeout.ms",
        "transactional.id",
    }
)
"""librdkafka properties whose names and values may be logged; nothing else is."""


def is_secret_key(key: str) -> bool:
    """Whether the value of librdkafka property ``key`` must be kept out of logs and errors.

    firesteel's one rule (:func:`firesteel.core.toolkit.is_secret`) with
    :data:`LOGGABLE_KEYS` as the allow-list: an unknown or misspelled key
    (``sasl.pasword``) counts as secret.
    """
    return is_secret(key, LOGGABLE_KEYS)


def client_config(passthrough: Mapping[str, str], **overrides: Any) -> dict[str, Any]:
    """librdkafka properties from the ``kafka.*`` options, then ``overrides``.

    ``overrides`` use librdkafka spelling with ``_`` for ``.``; they are the
    settings a role depends on for correctness (isolation level, idempotence),
    so they win over what the user passed.
    """
    config: dict[str, Any] = {
        key[len(PREFIX) :]: value
        for key, value in passthrough.items()
        if key.lower().startswith(PREFIX)
    }
    for key, value in overrides.items():
        config[key.replace("_", ".")] = value
    return config


def secrets_of(config: Mapping[str, Any]) -> list[str]:
    """The values of properties off the allow-list (to scrub them from error texts).

    Callables (delivery and error callbacks) are not configuration text and are skipped.
    """
    return [str(v) for k, v in config.items() if is_secret_key(k) and not callable(v) and str(v)]


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """What may be logged of ``config``: allow-listed properties, and a count of the others.

    Neither the names nor the values of the other properties appear: a
    misspelled secret key is as secret as a well-spelled one.
    """
    shown = {k: v for k, v in config.items() if not is_secret_key(k)}
    hidden = len(config) - len(shown)
    if hidden:
        shown["(not shown)"] = f"{hidden} more properties"
    return shown


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` with every secret value replaced by ``<redacted>``."""
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 3:
            text = text.replace(secret, REDACTED)
    return text


def safe_error(exc: BaseException, config: Mapping[str, Any]) -> str:
    """The message of a client error with the configuration's secrets scrubbed out."""
    return scrub(str(exc), secrets_of(config))


def validate_client_config(
    passthrough: Mapping[str, str],
    role: Literal["producer", "consumer"],
    where: str,
    defaults: Mapping[str, Any] | None = None,
) -> None:
    """Check every ``kafka.*`` option with librdkafka itself, before any task runs.

    librdkafka checks names, types, ranges and choices (``compression.type``,
    ``acks``, ``linger.ms``...) as each property is set, so a client is
    created without ``bootstrap.servers`` (it connects nowhere) and dropped.
    Checks librdkafka makes only when the client starts (certificate files,
    SASL providers) depend on the machine, and the executors' may differ from
    the driver's, so those are left to the tasks. On an
    error the option at fault is found by checking each alone, so the
    :class:`ConfigError` names it as the user typed it; values off the
    allow-list are scrubbed from the text. ``defaults`` are the settings the
    role adds beneath the user's (e.g. ``enable.idempotence``), so conflicts
    with them show here too.
    """
    from confluent_kafka import Consumer, KafkaException, Producer

    client = Producer if role == "producer" else Consumer
    base: dict[str, Any] = {**(defaults or {}), "log_level": 3}
    if role == "consumer":
        base["group.id"] = "firesteel-config-check"
    typed = {
        key: (key[len(PREFIX) :], value)
        for key, value in passthrough.items()
        if key.lower().startswith(PREFIX) and key.lower() != f"{PREFIX}bootstrap.servers"
    }

    def failure(config: dict[str, Any]) -> KafkaException | None:
        try:
            client({**base, **config})
        except KafkaException as exc:
            # confluent-kafka prefixes errors of rd_kafka_new (start-up checks) so.
            started = exc.args[0].str().startswith(f"Failed to create {role}")
            return None if started else exc
        return None

    everything = failure(dict(typed.values()))
    if everything is None:
        return
    secrets = secrets_of(dict(typed.values()))
    for option, (key, value) in typed.items():
        alone = failure({key: value})
        if alone is not None:
            text = scrub(alone.args[0].str(), secrets)
            msg = f"{where}: option '{option}' is not valid for librdkafka's {role}: {text}"
            raise ConfigError(msg) from alone
    text = scrub(everything.args[0].str(), secrets)
    msg = f"{where}: options 'kafka.*' are not valid for librdkafka's {role}: {text}"
    raise ConfigError(msg) from everything


_NEVER_PROBED = frozenset({"bootstrap.servers", "metadata.broker.list"})
"""Keys a probe client must not get: with them it would connect somewhere."""


def consumer_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` without the producer properties a consumer ignores (``linger.ms``,
    ``acks``, ``transactional.id``...).

    A sink's consumers (its commit-marker readers) are built from the same
    ``kafka.*`` options as its producers, and librdkafka prints a CONFWARN line
    for every producer property of every consumer created: one per task and
    batch. Which properties those are is asked of librdkafka itself, one
    property at a time, once per process.
    """
    return {
        key: value
        for key, value in config.items()
        if callable(value) or key in _NEVER_PROBED or not _producer_only(key, str(value))
    }


class _Captured:
    """A ``logger`` for a librdkafka client that keeps the log lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, level: int, fmt: str, *args: object) -> None:
        self.lines.append(fmt % args if args else fmt)


@functools.lru_cache(maxsize=256)
def _producer_only(key: str, value: str) -> bool:
    from confluent_kafka import Consumer, KafkaException

    captured = _Captured()
    try:
        probe = Consumer({"group.id": "firesteel-config-check", key: value, "logger": captured})
    except KafkaException:
        # Not a valid consumer setting at all: left in, so the real client names it.
        return False
    try:
        probe.poll(0)
    finally:
        probe.close()
    return any("is a producer property" in line for line in captured.lines)
