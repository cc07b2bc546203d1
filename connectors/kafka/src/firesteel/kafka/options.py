"""The options of ``firesteel.kafka``, as users type them in ``.option(...)``.

Names follow Spark's own Kafka connector where one exists (``subscribe``,
``startingOffsets``, ``maxOffsetsPerTrigger``, ``failOnDataLoss``...). Every
``kafka.*`` key goes to librdkafka unchanged (see :mod:`firesteel.kafka.config`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from firesteel.core.spi import ConfigError, Guarantee, SinkOptions, check_ranges, option
from firesteel.core.toolkit import ErrorPolicy, require_absolute
from firesteel.kafka.config import PREFIX, validate_client_config
from firesteel.sinks.spi import check_send_connect, send_connect_option

CONNECTOR = "firesteel.kafka"
PASSTHROUGH = (PREFIX,)

ValueFormat = Literal["binary", "json", "avro"]
ExactlyOnceMode = Literal["write-ahead", "in-task"]

DAY_MS = 86_400_000
"""The longest wait any ``*.ms`` option allows: a day."""
DEFAULT_RETRY_TIMEOUT_MS = 120_000
"""Option ``retry.timeout.ms``'s default: how long a running query waits out a broker outage
(:mod:`firesteel.kafka.outage`). Measured on the test broker (Apache Kafka 3.9.1, one node,
2 cores at load 7-9): stopped by SIGTERM and started again on its folder, it answered
metadata and took records 6.5-7.4 s after the signal; stopped by SIGKILL (its logs
recovered at the start), 17.7-19.2 s after. Two minutes is six times the slower, and within
librdkafka's default ``message.timeout.ms`` (5 minutes), so records queued in a producer
outlast it."""
MAX_TRANSACTION_TIMEOUT_MS = 900_000
"""Apache Kafka's default broker cap ``transaction.max.timeout.ms`` (15 minutes)."""
MIN_TRANSACTION_TIMEOUT_MS = 1_000


SINK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
"""A sink id becomes part of transactional ids and consumer-group names."""
TRANSACTIONAL_ID_PREFIX = re.compile(r"[A-Za-z0-9._-]{1,100}")


def _require_bootstrap(passthrough: dict[str, str]) -> None:
    if not any(k.lower() == "kafka.bootstrap.servers" for k in passthrough):
        msg = f"{CONNECTOR}: option 'kafka.bootstrap.servers' is required (host:port,...)"
        raise ConfigError(msg)


@dataclass(frozen=True, kw_only=True)
class KafkaSourceOptions:
    """Options of ``spark.readStream.format("firesteel.kafka")``."""

    checkpoint_location: str | None = option(
        None,
        name="checkpointLocation",
        doc="the query's checkpoint location, the value given to writeStream (PySpark does "
        "not tell a Python source): needed where the start depends on the moment it is "
        "resolved (startingOffsets latest, the default, a timestamp or -1 in JSON), which "
        "is pinned there; with it the source also counts bad records in query progress and "
        "records its lag",
    )
    subscribe: str | None = option(None, doc="comma-separated topics to read")
    subscribe_pattern: str | None = option(
        None, name="subscribePattern", doc="regular expression matching whole topic names"
    )
    starting_offsets: str = option(
        "latest",
        name="startingOffsets",
        doc="earliest, latest, or JSON {topic: {partition: offset}} (-2 earliest, -1 latest)",
    )
    starting_timestamp: int | None = option(
        None,
        name="startingTimestamp",
        doc="start every partition at the first record with timestamp >= this (ms since epoch)",
        min=0,
        max=2**63 - 1,
    )
    max_offsets_per_trigger: int | None = option(
        None,
        name="maxOffsetsPerTrigger",
        doc="admission control: at most this many offsets per batch, shared fairly by partitions",
        min=1,
    )
    fail_on_data_loss: bool = option(
        True,
        name="failOnDataLoss",
        doc="fail when offsets to read were deleted by retention (false: skip them, logged)",
    )
    include_headers: bool = option(True, name="includeHeaders", doc="add the headers column")
    progress_group_id: str | None = option(
        None,
        doc="consumer group to which committed batch offsets are reported (lag monitoring)",
    )
    value_format: ValueFormat = option(
        "binary", doc="decode the value: binary (as is), json or avro"
    )
    value_schema: str | None = option(
        None,
        doc="json: DDL ('id BIGINT, name STRING') or Spark JSON schema; avro: Avro schema JSON",
    )
    value_schema_file: str | None = option(None, doc="file holding value.schema")
    errors: ErrorPolicy = option(
        ErrorPolicy.FAIL,
        doc="undecodable values: fail, skip (counted, logged) or quarantine (to errors.topic)",
    )
    errors_topic: str | None = option(None, doc="dead-letter topic for errors=quarantine")
    poll_timeout_ms: int = option(
        120_000,
        doc="how long a task waits for records its batch was promised before failing",
        min=1,
        max=DAY_MS,
    )
    consume_batch_size: int = option(
        10_000, doc="records per confluent-kafka consume() call", min=1, max=1_000_000
    )
    retry_timeout_ms: int = option(
        DEFAULT_RETRY_TIMEOUT_MS,
        doc="how long a running query waits out unreachable brokers (a restart) in its "
        "metadata requests and reads, retrying with backoff, before failing",
        min=1,
        max=DAY_MS,
    )
    passthrough: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_ranges(self, CONNECTOR)
        _require_bootstrap(self.passthrough)
        if self.checkpoint_location is not None:
            require_absolute("checkpointLocation", self.checkpoint_location)
        if bool(self.subscribe) == bool(self.subscribe_pattern):
            msg = f"{CONNECTOR}: set exactly one of options 'subscribe' and 'subscribePattern'"
            raise ConfigError(msg)
        if self.subscribe_pattern:
            try:
                re.compile(self.subscribe_pattern)
            except re.error as exc:
                msg = f"{CONNECTOR}: option 'subscribePattern' is not a valid regex: {exc}"
                raise ConfigError(msg) from exc
        if self.value_format != "binary" and not (self.value_schema or self.value_schema_file):
            msg = (
                f"{CONNECTOR}: option 'value.format' is {self.value_format}; set "
                "'value.schema' or 'value.schema.file' to say which columns to decode"
            )
            raise ConfigError(msg)
        if self.errors is ErrorPolicy.QUARANTINE and not self.errors_topic:
            msg = f"{CONNECTOR}: option 'errors' is quarantine; set 'errors.topic' (dead letters)"
            raise ConfigError(msg)
        validate_client_config(self.passthrough, "consumer", CONNECTOR)

    @property
    def topics(self) -> list[str]:
        """The topics of ``subscribe``, in the order given."""
        return [t.strip() for t in (self.subscribe or "").split(",") if t.strip()]


@dataclass(frozen=True, kw_only=True)
class KafkaSinkOptions(SinkOptions):
    """Options of ``df.writeStream.format("firesteel.kafka")`` (plus ``sink.id`` from
    :class:`SinkOptions`, derived from the output topics by default)."""

    guarantee: Guarantee | None = option(
        None,
        doc="none (fire and forget), at-least-once (default: every delivery confirmed) or "
        "exactly-once (transactions)",
    )
    sink_new_stream: bool = option(
        False,
        doc="true: this checkpoint starts a new stream into topics that already hold another "
        "query's committed batches, and writes them again (default: such a start is "
        "refused); keep it set for the life of this checkpoint",
    )
    topic: str | None = option(None, doc="topic for rows without a topic column")
    value_format: ValueFormat = option(
        "binary",
        doc="binary: the value column as is; json/avro: encode every non-Kafka column",
    )
    value_schema: str | None = option(None, doc="Avro schema JSON for value.format=avro")
    value_schema_file: str | None = option(None, doc="file holding value.schema")
    partitioner: str | None = option(
        None,
        doc="'module:function' called as f(key: bytes | None, partitions: int) -> int "
        "(default: librdkafka's, set with kafka.partitioner)",
    )
    exactly_once_mode: ExactlyOnceMode = option(
        "write-ahead",
        name="exactly.once.mode",
        doc="exactly-once: write-ahead (tasks log their rows in the checkpoint; the batch's "
        "commit sends each segment of its recorded plan in its own transaction, so a changed "
        "partition count between a crash and the restart is safe) or in-task (each task "
        "commits its own transaction: a changed partition count fails the query, after the "
        "re-run's tasks committed; see the README)",
    )
    send_connect: str | None = send_connect_option("exactly.once.mode=write-ahead")
    transactional_id_prefix: str = option(
        "firesteel",
        doc="exactly-once: transactional ids are <prefix>-<sink id>-<partition>",
    )
    marker_topic: str | None = option(
        None,
        doc="exactly-once: existing topic whose partition 0 carries the commit markers "
        "(consumer-group offsets; default: option 'topic')",
    )
    flush_timeout_ms: int = option(
        300_000,
        doc="how long a task waits for delivery reports before failing",
        min=1,
        max=DAY_MS,
    )
    retry_timeout_ms: int = option(
        DEFAULT_RETRY_TIMEOUT_MS,
        doc="how long a running query waits out unreachable brokers (a restart): metadata, "
        "delivery of queued records, and (exactly-once) commit markers and the retriable "
        "errors of init_transactions, send_offsets_to_transaction and commit_transaction, "
        "retried with backoff before failing",
        min=1,
        max=DAY_MS,
    )
    passthrough: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_ranges(self, CONNECTOR)
        _require_bootstrap(self.passthrough)
        if self.value_format == "avro" and not (self.value_schema or self.value_schema_file):
            msg = f"{CONNECTOR}: option 'value.format' is avro; set 'value.schema(.file)'"
            raise ConfigError(msg)
        if self.partitioner is not None and ":" not in self.partitioner:
            msg = (
                f"{CONNECTOR}: option 'partitioner' must be 'module:function', "
                f"got {self.partitioner!r}"
            )
            raise ConfigError(msg)
        if self.sink_id is not None and not SINK_ID.fullmatch(self.sink_id):
            msg = (
                f"{CONNECTOR}: option 'sink.id' is {self.sink_id!r}; use 1-200 letters, digits, "
                "'.', '_' or '-', starting with a letter or digit (it names transactional ids "
                "and consumer groups)"
            )
            raise ConfigError(msg)
        if not TRANSACTIONAL_ID_PREFIX.fullmatch(self.transactional_id_prefix):
            msg = (
                f"{CONNECTOR}: option 'transactional.id.prefix' is "
                f"{self.transactional_id_prefix!r}; use 1-100 letters, digits, '.', '_' or '-'"
            )
            raise ConfigError(msg)
        defaults: dict[str, object] = {}
        if self.delivery > Guarantee.AT_MOST_ONCE:
            defaults = {"acks": "all", "enable.idempotence": True}
            self._require_confirmed_delivery()
        if self.delivery is Guarantee.EXACTLY_ONCE:
            if not (self.marker_topic or self.topic):
                msg = (
                    f"{CONNECTOR}: guarantee exactly-once needs option 'topic' or "
                    "'marker.topic' (an existing topic that carries commit markers)"
                )
                raise ConfigError(msg)
            self.transaction_timeout_ms()
            defaults["transactional.id"] = "firesteel-config-check"
        check_send_connect(
            self.send_connect,
            logs_ahead=self.delivery is Guarantee.EXACTLY_ONCE
            and self.exactly_once_mode == "write-ahead",
            otherwise="the other guarantees and modes send from the tasks already",
            use="guarantee exactly-once with exactly.once.mode write-ahead",
        )
        validate_client_config(self.passthrough, "producer", CONNECTOR, defaults)

    def _require_confirmed_delivery(self) -> None:
        """at-least-once and exactly-once need every replica's ack and idempotence."""
        given = {k.lower(): v.strip().lower() for k, v in self.passthrough.items()}
        acks = given.get("kafka.acks", given.get("kafka.request.required.acks"))
        if acks is not None and acks not in ("all", "-1"):
            msg = (
                f"{CONNECTOR}: option 'kafka.acks' is {acks}; guarantee "
                f"{self.delivery.label} needs all (or -1), the default: drop the option"
            )
            raise ConfigError(msg)
        if given.get("kafka.enable.idempotence") == "false":
            msg = (
                f"{CONNECTOR}: option 'kafka.enable.idempotence' is false; guarantee "
                f"{self.delivery.label} needs the idempotent producer: drop the option"
            )
            raise ConfigError(msg)

    @property
    def delivery(self) -> Guarantee:
        """The delivery guarantee the sink writes with (default at-least-once)."""
        return Guarantee.AT_LEAST_ONCE if self.guarantee is None else self.guarantee

    def transaction_timeout_ms(self) -> int:
        """``kafka.transaction.timeout.ms`` (librdkafka default 60000), validated."""
        raw = next(
            (v for k, v in self.passthrough.items() if k.lower() == "kafka.transaction.timeout.ms"),
            "60000",
        )
        try:
            value = int(raw)
        except ValueError as exc:
            msg = f"{CONNECTOR}: option 'kafka.transaction.timeout.ms' must be an integer"
            raise ConfigError(msg) from exc
        if not MIN_TRANSACTION_TIMEOUT_MS <= value <= MAX_TRANSACTION_TIMEOUT_MS:
            msg = (
                f"{CONNECTOR}: option 'kafka.transaction.timeout.ms' is {value}; it must be "
                f"between {MIN_TRANSACTION_TIMEOUT_MS} and the broker's "
                f"transaction.max.timeout.ms (default {MAX_TRANSACTION_TIMEOUT_MS}), and longer "
                "than a write task takes"
            )
            raise ConfigError(msg)
        return value
