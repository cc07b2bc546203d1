"""The processing time of a batch: Spark's batch timestamp, unless the wall clock went back.

Spark stamps each micro-batch with its driver's wall clock (``current_timestamp()``,
kept in the offsets log so a re-run sees the same). A wall clock can go back: an NTP
step, a restart on a host whose clock is behind. Processing time taken from it as it
is would go back too, and every timer registered before would wait until the clock
caught up: a job restarted an hour behind fired no processing-time timer for an hour
(reproduced with the whole job's clock set back, Spark's JVM included).

So the processing time ``P(N)`` of batch N, from Spark's timestamp ``S(N)``:

* ``P(N) = S(N)`` while the wall clock is ahead of the last processing time
  (``S(N) > P(N-1)``): the usual case, and how a clock that was behind rejoins;
* otherwise ``P(N) = P(N-1) + max(1, S(N) - S(N-1))``: time goes on at the pace
  of the wall clock since the last batch, at least 1 ms per batch, never back.

A clock that jumps forward is taken as it is: time passed. ``(P, S)`` of the last
batch is kept in the state itself, in every key group a task owns (a reserved value
state under the empty key), so it is restored with the state, follows the key
groups through a rescale, and gives the same ``P(N)`` on every re-run of N.
"""

from __future__ import annotations

from typing import cast

from firesteel.state.api import ValueState
from firesteel.state.backend import KeyedStateStore
from firesteel.state.descriptors import reserved_value_state
from firesteel.state.keygroups import KeyGroupRange

CLOCK = reserved_value_state("__firesteel_clock__", list)
"""The reserved state holding, per key group, ``[P, S]`` of the last batch (see module docs)."""

CLOCK_KEY: tuple[()] = ()
"""The key the clock is kept under: no grouping key is empty, so it meets no user's key."""


def processing_time(spark_ms: int, last: tuple[int, int] | None) -> int:
    """``P(N)`` from ``S(N)`` and the ``(P(N-1), S(N-1))`` of the last batch, if any."""
    if last is None:
        return spark_ms
    last_processing, last_spark = last
    if spark_ms > last_processing:
        return spark_ms
    return last_processing + max(1, spark_ms - last_spark)


def advance(store: KeyedStateStore, key_groups: KeyGroupRange, spark_ms: int) -> int:
    """The processing time of this batch in ``store``'s key groups, recorded in each of them
    and set as the store's ``now_ms``."""
    clock = cast(ValueState, store.state(CLOCK))
    last: tuple[int, int] | None = None
    for key_group in key_groups:
        store.set_current_key(CLOCK_KEY, key_group)
        stored = clock.value()
        if stored is not None and (last is None or stored[0] > last[0]):
            last = (int(stored[0]), int(stored[1]))
    now_ms = processing_time(spark_ms, last)
    for key_group in key_groups:
        store.set_current_key(CLOCK_KEY, key_group)
        clock.update([now_ms, spark_ms])
    store.now_ms = now_ms
    return now_ms
