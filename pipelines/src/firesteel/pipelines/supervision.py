"""Supervision of a pipeline's streamlet processes: bounded restarts with backoff.

The runner restarts a streamlet whose process died (a signal, an error exit)
under ``firesteel.supervision`` in the configuration, Flink's failure-rate
restart strategy with an exponential delay::

    firesteel.supervision {
      restarts = 3          # at most this many restarts of one streamlet within `window`;
                            # 0 turns supervision off (the first death stops the pipeline)
      window = 10 minutes
      backoff = 1s          # delay before a restart, doubled for each earlier one in the window
      max-backoff = 30s     # ... up to this
    }

A streamlet that dies once more than ``restarts`` allows within ``window``
stops the whole pipeline, naming it and its log. A restarted streamlet
resumes from its checkpoints, so its output stays exactly-once: the runner
first SIGKILLs what is left of the dead process's group (its Spark JVM,
Python workers), so nothing of the old run still writes beside the new one.
A streamlet whose process exits 0 (every query finished) is not restarted.
"""

from __future__ import annotations

import datetime
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from firesteel.pipelines.errors import did_you_mean
from firesteel.pipelines.parameters import parse_duration

STOPPED_EXIT = 3
"""The exit code of a process that stopped its streamlets for good (one failed more often than
supervision allows, or finished): the runner stops the pipeline instead of restarting it."""

SUPERVISION_DEFAULTS: dict[str, Any] = {
    "restarts": 3,
    "window": "10 minutes",
    "backoff": "1s",
    "max-backoff": "30s",
}


@dataclass(frozen=True)
class RestartPolicy:
    """How often, and how soon, a dead streamlet is restarted (module docs)."""

    restarts: int
    window: datetime.timedelta
    backoff: datetime.timedelta
    max_backoff: datetime.timedelta

    def delay(self, earlier: int) -> float:
        """Seconds before a restart that has ``earlier`` restarts before it in the window."""
        seconds = self.backoff.total_seconds() * 2**earlier
        return min(seconds, self.max_backoff.total_seconds())


def restart_policy(settings: Mapping[str, Any]) -> tuple[RestartPolicy | None, list[str]]:
    """The policy ``settings`` (``firesteel.supervision``'s keys) give, and every problem."""
    problems = [
        f"firesteel.supervision.{key}: unknown key{did_you_mean(key, list(SUPERVISION_DEFAULTS))}"
        for key in settings
        if key not in SUPERVISION_DEFAULTS
    ]
    merged = {**SUPERVISION_DEFAULTS, **settings}
    restarts = merged["restarts"]
    if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0:
        problems.append(
            f"firesteel.supervision.restarts: {restarts!r} is not a whole number >= 0 "
            "(0 turns supervision off)"
        )
    durations: dict[str, datetime.timedelta] = {}
    for key in ("window", "backoff", "max-backoff"):
        try:
            durations[key] = parse_duration(merged[key])
        except ValueError as exc:
            problems.append(f"firesteel.supervision.{key}: {exc}")
            continue
        if durations[key] < datetime.timedelta(0):
            problems.append(f"firesteel.supervision.{key}: must not be negative")
    if problems:
        return None, problems
    policy = RestartPolicy(
        restarts, durations["window"], durations["backoff"], durations["max-backoff"]
    )
    return policy, []


class Restarts:
    """One streamlet's restarts under a :class:`RestartPolicy`."""

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self.total = 0
        """Restarts granted in this run."""
        self._recent: deque[float] = deque()

    def after_death(self, now: float) -> float | None:
        """Seconds to wait before restarting a streamlet that died at ``now`` (monotonic
        seconds), or ``None`` when the policy allows no more restarts."""
        window = self.policy.window.total_seconds()
        while self._recent and now - self._recent[0] > window:
            self._recent.popleft()
        if len(self._recent) >= self.policy.restarts:
            return None
        delay = self.policy.delay(len(self._recent))
        self._recent.append(now)
        self.total += 1
        return delay
