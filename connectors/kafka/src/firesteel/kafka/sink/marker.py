"""The commit marker: a consumer-group offset that says "batch N - 1 is committed".

Each Spark partition p of an exactly-once sink owns the consumer group
``<prefix>-<sink id>-marker-<p>``; its committed offset on partition 0 of the
marker topic is the last batch that partition committed, plus one, set by
``send_offsets_to_transaction`` inside the batch's transaction. Group offsets
become visible only when the transaction commits, so data and marker appear
together. The offset's metadata (:func:`marker_metadata`) names the query
and the producer instance that committed it.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from firesteel.kafka.outage import is_outage

logger = logging.getLogger(__name__)

NO_MARKER = -1
"""The committed batch of a partition that never committed one."""
MARKER_METADATA_VERSION = 1
"""Version of the JSON a commit marker carries in its offset metadata."""
_COORDINATOR_NOT_READY = frozenset(
    {"NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE"}
)


def marker_metadata(query_id: str, producer_token: str) -> str:
    """The offset metadata of a commit marker: the query and the producer instance that
    committed it (``by``: :attr:`~firesteel.kafka.pool.TransactionalClient.token`)."""
    fields = {"v": MARKER_METADATA_VERSION, "query": query_id, "by": producer_token}
    return json.dumps(fields, separators=(",", ":"))


def _marker_field(metadata: str | None, name: str) -> str | None:
    if not metadata:
        return None
    try:
        parsed = json.loads(metadata)
    except ValueError:
        return None
    value = parsed.get(name) if isinstance(parsed, dict) else None
    return value if isinstance(value, str) else None


def marker_owner(metadata: str | None) -> str | None:
    """The query id a marker's metadata names; ``None`` for markers without one."""
    return _marker_field(metadata, "query")


def marker_writer(metadata: str | None) -> str | None:
    """The token of the producer instance that committed a marker, if it says."""
    return _marker_field(metadata, "by")


def committed_batch(marker_offset: int) -> int:
    """The last batch a marker offset says was committed (:data:`NO_MARKER` for none)."""
    return marker_offset - 1 if marker_offset >= 0 else NO_MARKER


def committed_marker(consumer: Any, partition: Any, timeout: float) -> Any:
    """The marker group's committed offset, retried while its coordinator is not ready.

    librdkafka returns ``NOT_COORDINATOR`` from ``committed()`` instead of
    retrying it while a fresh broker is still creating ``__consumer_offsets``
    or a coordinator moves, and a timeout or transport error while a broker
    restarts; those are waited out until ``timeout``, anything else is raised.
    An error the broker gives for the partition alone comes back on the
    returned partition, whose offset then says nothing: it is raised (or
    waited out) the same way, never read as "no marker", which would write a
    committed batch again.
    """
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            (marker,) = consumer.committed([partition], timeout=max(left, 0.5))
            if marker.error is not None:
                raise KafkaException(marker.error)
            return marker
        except KafkaException as exc:
            error = exc.args[0]
            not_ready = is_outage(error) or error.name() in _COORDINATOR_NOT_READY
            if not not_ready or left <= 0:
                raise
            logger.info("firesteel.kafka sink: marker group not ready (%s); retrying", error)
            time.sleep(0.2)
