"""The end-to-end guarantee check: Table 8-1 of "Stream Processing with Apache Flink".

==================  ============  ==============  ===============  ================
source \\ sink       any           idempotent      write-ahead log  two-phase commit
==================  ============  ==============  ===============  ================
not resettable      at-most-once  at-most-once    at-most-once     at-most-once
resettable          at-least-once exactly-once    at-least-once    exactly-once
==================  ============  ==============  ===============  ================

A write-ahead-log sink is exactly-once when its target is an upsert target
(re-sending a committed segment overwrites rather than appends): such sinks
declare :attr:`SinkKind.WRITE_AHEAD_LOG_UPSERT`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from firesteel.core.errors import ConfigError, GuaranteeError


class Guarantee(enum.IntEnum):
    """A delivery guarantee, ordered from weakest to strongest."""

    AT_MOST_ONCE = 0
    """Records may be lost after a failure, never duplicated."""
    AT_LEAST_ONCE = 1
    """No record is lost; records may be written more than once after a failure."""
    EXACTLY_ONCE = 2
    """Every record affects the output exactly once, failures included."""

    @property
    def label(self) -> str:
        """The option spelling, e.g. ``exactly-once``."""
        return self.name.lower().replace("_", "-")

    @classmethod
    def parse(cls, text: str, option: str = "guarantee") -> Guarantee:
        """Parse ``exactly-once`` / ``at-least-once`` / ``at-most-once`` (also ``none``)."""
        key = text.strip().lower().replace("_", "-")
        if key == "none":
            return cls.AT_MOST_ONCE
        for member in cls:
            if member.label == key:
                return member
        labels = ", ".join(m.label for m in cls)
        msg = f"option '{option}': unknown guarantee {text!r}; valid values: {labels}"
        raise ConfigError(msg)


class Replay(enum.Enum):
    """Whether a source can re-read the records of an offset range after a failure."""

    RESETTABLE = "resettable"
    NOT_RESETTABLE = "not-resettable"


class SinkKind(enum.Enum):
    """How a sink makes its writes survive a replay (the columns of Table 8-1)."""

    PLAIN = "plain"
    """Writes at once, no deduplication: replays duplicate."""
    IDEMPOTENT = "idempotent"
    """Writes at once with deterministic keys: a replay overwrites."""
    WRITE_AHEAD_LOG = "write-ahead-log"
    """Logs records durably, sends them once the batch commits; a crash while
    sending re-sends a segment."""
    WRITE_AHEAD_LOG_UPSERT = "write-ahead-log-upsert"
    """A write-ahead-log sink whose target upserts, so a re-sent segment overwrites."""
    TWO_PHASE_COMMIT = "two-phase-commit"
    """Writes invisibly, publishes on commit; commit is idempotent."""


_RESETTABLE_ROW = {
    SinkKind.PLAIN: Guarantee.AT_LEAST_ONCE,
    SinkKind.IDEMPOTENT: Guarantee.EXACTLY_ONCE,
    SinkKind.WRITE_AHEAD_LOG: Guarantee.AT_LEAST_ONCE,
    SinkKind.WRITE_AHEAD_LOG_UPSERT: Guarantee.EXACTLY_ONCE,
    SinkKind.TWO_PHASE_COMMIT: Guarantee.EXACTLY_ONCE,
}


@dataclass(frozen=True)
class Part:
    """One participant of a query as the guarantee check sees it."""

    name: str
    """What the user calls it, e.g. ``source #0 (firesteel.files)``."""
    replay: Replay | None = None
    """Set for sources."""
    sink_kind: SinkKind | None = None
    """Set for sinks."""


def end_to_end(replay: Replay, kind: SinkKind) -> Guarantee:
    """The guarantee a source with ``replay`` feeding a sink of ``kind`` delivers."""
    if replay is Replay.NOT_RESETTABLE:
        return Guarantee.AT_MOST_ONCE
    return _RESETTABLE_ROW[kind]


def check(sources: Sequence[Part], sink: Part, required: Guarantee | None) -> Guarantee:
    """Compute the guarantee of a query and refuse it when below ``required``.

    A query with several sources delivers the weakest of its source/sink pairs.
    Raises :class:`GuaranteeError` naming every part that falls short.
    """
    if sink.sink_kind is None:
        msg = f"{sink.name} does not declare a sink kind"
        raise ConfigError(msg)
    if not sources:
        msg = f"{sink.name}: the query has no source the guarantee check can see"
        raise GuaranteeError(msg)
    per_source = {
        source.name: end_to_end(source.replay or Replay.NOT_RESETTABLE, sink.sink_kind)
        for source in sources
    }
    achieved = min(per_source.values())
    if required is None or achieved >= required:
        return achieved
    culprits = []
    for source in sources:
        if source.replay is not Replay.RESETTABLE:
            culprits.append(f"{source.name} cannot replay its input after a failure")
    if not culprits:
        culprits.append(
            f"{sink.name} is a {sink.sink_kind.value} sink, which gives "
            f"{_RESETTABLE_ROW[sink.sink_kind].label} with a resettable source"
        )
    msg = (
        f"the query asks for {required.label} but its parts deliver {achieved.label}: "
        + "; ".join(culprits)
    )
    raise GuaranteeError(msg)
