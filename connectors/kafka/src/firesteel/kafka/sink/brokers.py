"""The sinks' checks of the cluster, on the driver before the first task.

Spark rebuilds a sink's driver half for every batch, often in a reused Python
process: a check that passed in this process is not repeated.
"""

from __future__ import annotations

import logging
from typing import Any

from firesteel.core.spi import ConfigError
from firesteel.core.toolkit import WorkerCache
from firesteel.kafka.first_contact import first_contact

logger = logging.getLogger(__name__)

_REACHED: WorkerCache[str, bool] = WorkerCache()
"""Bootstrap servers that answered in this process."""
_PREPARED: WorkerCache[tuple[str, str, int], bool] = WorkerCache()
"""(bootstrap servers, marker topic, timeout) whose exactly-once checks passed here."""


def reach(config: dict[str, Any], patience: int | None = None) -> None:
    """Fail the query before its first task unless the cluster answers (within ``patience``
    ms of an outage, if given: see :func:`~firesteel.kafka.first_contact.first_contact`)."""
    from confluent_kafka.admin import AdminClient

    def contact() -> bool:
        first_contact(AdminClient(config), config, "firesteel.kafka sink", patience=patience)
        return True

    _REACHED.get(str(config.get("bootstrap.servers")), contact)


def check_transactional_target(
    config: dict[str, Any], marker_topic: str, timeout_ms: int, patience: int | None = None
) -> bool:
    """Check the marker topic exists and ``timeout_ms`` fits the broker's cap.

    Raises :class:`ConfigError` naming the option otherwise; ``False`` if the
    checks had already passed in this process (nothing was asked). ``patience``
    as for :func:`reach`.
    """
    from confluent_kafka.admin import AdminClient

    asked = False

    def check() -> bool:
        nonlocal asked
        asked = True
        _check_target(AdminClient(config), config, marker_topic, timeout_ms, patience)
        return True

    _PREPARED.get((str(config.get("bootstrap.servers")), marker_topic, timeout_ms), check)
    return asked


def _check_target(
    admin: Any, config: dict[str, Any], marker_topic: str, timeout_ms: int, patience: int | None
) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource

    metadata = first_contact(admin, config, "firesteel.kafka sink", marker_topic, patience)
    topic = metadata.topics.get(marker_topic)
    if topic is None or topic.error is not None or not topic.partitions:
        msg = (
            f"firesteel.kafka sink: marker topic {marker_topic!r} (option 'marker.topic' "
            "or 'topic') does not exist; create it before starting the query"
        )
        raise ConfigError(msg)
    brokers = list(metadata.brokers)
    if brokers:
        _check_broker_timeout(admin, brokers[0], timeout_ms, ConfigResource, KafkaException)


def _check_broker_timeout(
    admin: Any, broker: int, timeout_ms: int, resource_cls: Any, error_cls: Any
) -> None:
    """Refuse a transaction timeout above the broker's ``transaction.max.timeout.ms``."""
    resource = resource_cls("broker", str(broker))
    try:
        configs = admin.describe_configs([resource])[resource].result(timeout=10)
    except (error_cls, TimeoutError, ValueError) as exc:
        logger.info("firesteel.kafka sink: broker config not readable (%s); skipping", exc)
        return
    entry = configs.get("transaction.max.timeout.ms")
    if entry is not None and entry.value and timeout_ms > int(entry.value):
        msg = (
            f"firesteel.kafka sink: kafka.transaction.timeout.ms={timeout_ms} exceeds "
            f"the broker's transaction.max.timeout.ms={entry.value}; lower it"
        )
        raise ConfigError(msg)
