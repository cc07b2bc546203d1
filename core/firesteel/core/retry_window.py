"""Retrying until a deadline: waits that double inside a bounded window.

The one clock behind every loop that outlasts an outage (object stores, Kafka
brokers, Cassandra nodes): a window opens at the first failure (or where the
caller opens it), each wait doubles from ``first_wait_s`` up to ``max_wait_s``
and never runs past the window's end, and progress closes the window, so that a
later failure opens a new one with short waits again. Callers decide what is
worth retrying, log each wait with their server and setting, and raise their
own error once :attr:`RetryWindow.expired`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

FIRST_WAIT_S = 0.2
"""The first wait by default: short enough to catch a server that blinked."""
MAX_WAIT_S = 5.0
"""The longest wait by default: a restarted server is noticed within this."""


@dataclass
class RetryWindow:
    """One operation's retry window (not thread-safe: one per operation)."""

    timeout_s: float
    """How long failures may go on, from the window's opening."""
    first_wait_s: float = FIRST_WAIT_S
    """The first wait; each further one doubles."""
    max_wait_s: float = MAX_WAIT_S
    """The longest wait."""
    began: float | None = None
    """When the window opened (``time.monotonic()``); None while it is closed."""
    waits: int = 0
    """Waits handed out since it opened."""

    def open(self, at: float | None = None) -> None:
        """Open the window now (or at ``at``, a ``time.monotonic()`` reading), unless open."""
        if self.began is None:
            self.began = time.monotonic() if at is None else at

    def close(self) -> None:
        """Progress: the next failure opens a new window, starting from the first wait."""
        self.began = None
        self.waits = 0

    @property
    def ongoing(self) -> bool:
        """Whether the window is open (a failure and no progress since)."""
        return self.began is not None

    @property
    def elapsed(self) -> float:
        """Seconds since the window opened; 0 while closed."""
        return 0.0 if self.began is None else time.monotonic() - self.began

    @property
    def left(self) -> float:
        """Seconds until the window ends (the whole timeout while closed); may be negative."""
        return self.timeout_s - self.elapsed

    @property
    def expired(self) -> bool:
        """Whether the window is open and its time is up."""
        return self.began is not None and self.left <= 0

    def next_wait(self) -> float:
        """Open the window if closed and hand out the next wait, cut to the time left."""
        self.open()
        wait = min(self.max_wait_s, self.first_wait_s * 2**self.waits, max(self.left, 0.0))
        self.waits += 1
        return wait
