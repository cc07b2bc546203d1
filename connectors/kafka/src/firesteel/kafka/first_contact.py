"""First contact with the cluster: a metadata request that fails soon and says where it went.

A client pointed at the wrong host or port (or a cluster that is down) makes
librdkafka retry its connections until the caller's timeout; its error then
says only "Broker transport failure". The source's and the sinks' first
request goes through :func:`first_contact`, which waits at most
:data:`CONNECT_TIMEOUT` and names the servers and the option that set them; a query
that reached its cluster before waits out an outage instead
(:mod:`firesteel.kafka.outage`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from firesteel.kafka.config import safe_error
from firesteel.kafka.errors import UnreachableError
from firesteel.kafka.outage import Outage

CONNECT_TIMEOUT = 10.0
"""Seconds the first metadata request may take. A live cluster answers in milliseconds (a
few seconds with SASL or TLS handshakes); the limit keeps the error well within 30 s of the
query's start."""


def first_contact(
    client: Any,
    config: Mapping[str, Any],
    who: str,
    topic: str | None = None,
    patience: int | None = None,
) -> Any:
    """Cluster metadata (of ``topic`` only, if given) from ``client``, a confluent-kafka
    consumer, producer or admin client built from ``config``.

    Raises :class:`UnreachableError` naming ``kafka.bootstrap.servers`` when no
    broker answered within :data:`CONNECT_TIMEOUT`; ``who`` starts the message.
    With ``patience`` (option ``retry.timeout.ms``, for a query that reached the
    cluster before) an outage is waited out that long instead, and past it
    :class:`~firesteel.kafka.errors.OutageError` names the servers and the option.
    """
    from confluent_kafka import KafkaException

    if patience is not None:
        outage = Outage(who, config, patience)
        return outage.run(lambda timeout: client.list_topics(topic, timeout=timeout), "metadata")
    try:
        return client.list_topics(topic, timeout=CONNECT_TIMEOUT)
    except KafkaException as exc:
        servers = config.get("bootstrap.servers", "")
        msg = (
            f"{who}: no broker of option 'kafka.bootstrap.servers' ({servers}) answered "
            f"within {CONNECT_TIMEOUT:.0f} s ({safe_error(exc, config)}). Check the host names "
            "and ports, that the brokers run, and that kafka.security.protocol matches their "
            "listener"
        )
        raise UnreachableError(msg) from exc
