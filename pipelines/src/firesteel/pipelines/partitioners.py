"""How a Kafka outlet spreads its records over its topic's partitions.

An :class:`~firesteel.pipelines.ports.Outlet` takes a ``partitioner``: a
function called as ``partitioner(key, partitions) -> partition`` for each
record, with the record's key (the outlet's ``key`` column as UTF-8 bytes, or
``None`` without one) and the topic's partition count, returning a partition
in ``range(partitions)`` (Kafka's ``Partitioner.partition``, Cloudflow's
custom partitioning function). It runs in Spark's Python workers, so it must
be a function at module level of a module they can import (one beside the
blueprint is: the runner puts its folder on their path). Without one, a
keyed outlet's records go where librdkafka's partitioner hashes their key;
:func:`round_robin` is Cloudflow's ``RoundRobinPartitioner``.

Local topics have no partitions: there a partitioner changes nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

Partitioner = Callable[[bytes | None, int], int]
"""``(key, partition count) -> partition``."""

_next = itertools.count()


def round_robin(key: bytes | None, partitions: int) -> int:
    """Each record to the next partition in turn, whatever its key (Cloudflow's
    ``RoundRobinPartitioner``): per writing task, as Kafka's ``RoundRobinPartitioner``
    is per producer."""
    return next(_next) % partitions


def reference(partitioner: Partitioner) -> str:
    """``module:function`` naming ``partitioner`` for the Kafka sink's ``partitioner``
    option; ValueError when Spark's Python workers could not import it by that name."""
    module = getattr(partitioner, "__module__", None)
    name = getattr(partitioner, "__qualname__", "")
    if not module or module == "__main__" or not name.isidentifier():
        msg = (
            f"partitioner {partitioner!r}: give a function defined at module level of an "
            "importable module (not a lambda, a nested function or one in __main__), so "
            "Spark's Python workers can import it"
        )
        raise ValueError(msg)
    return f"{module}:{name}"
