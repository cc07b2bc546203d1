"""Keyed processors whose output proves exactly-once state in crash tests."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from firesteel.state import (
    BroadcastContext,
    BroadcastStateDescriptor,
    KeyedProcessor,
    KeyState,
    OpenContext,
    StateBackend,
    ValueStateDescriptor,
    stateful,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class RankPerKey(KeyedProcessor):
    """Numbers each key's records 1, 2, 3... in sequence order, counting in keyed state.

    After any number of crashes, the ranks of a key must be exactly 1..n: a lost
    state update repeats a rank, an update applied twice skips one. Reads the
    ``seq`` column; override :meth:`row` to shape the output.
    """

    count = ValueStateDescriptor("count", int)

    def row(self, seq: int, key: Any, rank: int) -> dict[str, Any]:
        """One output row (default: ``seq``, ``key``, ``rank`` columns)."""
        return {"seq": seq, "key": key, "rank": rank}

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        count = state.value(self.count)
        seen = count.value() or 0
        seqs = sorted(rows.column("seq").to_pylist())
        count.update(seen + len(seqs))
        return [self.row(seq, key[0], seen + index + 1) for index, seq in enumerate(seqs)]


class RankPerKeyWithTimers(RankPerKey):
    """:class:`RankPerKey` that also sets a timer 1 ms after every batch a key has records in.

    A fired timer emits ``seq = -timestamp`` and ``rank = 0``; each key's timer
    rows must then be one per batch it had records in (except the last batch,
    whose timers are still pending), with distinct timestamps: a timer fired
    twice, lost, or fired on another clock in a re-run shows.
    """

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        state.register_timer(state.processing_time_ms + 1)
        return super().process(key, rows, state)

    def on_timer(self, key: Any, timestamp_ms: int, state: KeyState) -> Any:
        return [{"seq": -timestamp_ms, "key": key[0], "rank": 0}]


def rank_with_timers(
    records: DataFrame, backend: StateBackend, parallelism: int, restore_from: str | None = None
) -> DataFrame:
    """``records`` (``seq``, ``key``) ranked per key by :class:`RankPerKeyWithTimers` in the
    operator ``rank`` (max parallelism 32), as ``seq long, key string, rank long``: the
    stateful step every backend's state crash job shares, so their outputs compare."""
    return stateful(
        records,
        key=["key"],
        processor=RankPerKeyWithTimers(),
        output_schema="seq long, key string, rank long",
        backend=backend,
        name="rank",
        parallelism=parallelism,
        max_parallelism=32,
        restore_from=restore_from,
    )


class RankPerKeyWithRules(RankPerKey):
    """:class:`RankPerKey` with a broadcast input of rules (``rule``, ``limit``, ``version``):
    the latest limit per rule is kept in broadcast state, and every output row carries
    a digest of the whole map the partition held (column ``rules``) and the partition.

    Every partition of a batch must show the digest of the rules up to that batch,
    applied in version order, however often the job was killed and rescaled.
    """

    rules = BroadcastStateDescriptor("rules", int)

    def open(self, ctx: OpenContext) -> None:
        self.partition = ctx.partition

    def process_broadcast(self, record: dict[str, Any], ctx: BroadcastContext) -> None:
        ctx.state(self.rules).put(record["rule"], record["limit"])

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        self.digest = rules_digest(dict(state.broadcast(self.rules)))
        return super().process(key, rows, state)

    def row(self, seq: int, key: Any, rank: int) -> dict[str, Any]:
        return {
            "seq": seq,
            "key": key,
            "rank": rank,
            "rules": self.digest,
            "partition": self.partition,
        }


def rules_digest(rules: dict[str, int]) -> str:
    """A short digest of a broadcast map (what :class:`RankPerKeyWithRules` emits)."""
    return hashlib.sha256(json.dumps(sorted(rules.items())).encode()).hexdigest()[:16]
