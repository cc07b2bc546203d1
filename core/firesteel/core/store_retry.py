"""Riding out an object store's outage: an idempotent call is sent again, with backoff, for a
bounded window, each wait logged with the endpoint and the setting that bounds it.

The window is the setting ``<prefix>.retry.timeout.ms`` of the store's Hadoop
prefix (``fs.s3a.retry.timeout.ms``, ``fs.gs.retry.timeout.ms``,
``fs.azure.retry.timeout.ms``; per bucket as ``fs.s3a.bucket.<b>.retry.timeout.ms``),
by default :data:`DEFAULT_TIMEOUT_S`: long enough for a store (or the network
to it) to restart. Waits start at 0.2 s and double up to 5 s
(:class:`~firesteel.core.retry_window.RetryWindow`'s), around the client's own quick
retries. Past the window
the call fails with a :class:`~firesteel.core.errors.StorageError` naming the
endpoint and the setting. Only calls that may run twice are retried (reads,
listings, whole-object PUTs, deletes, copies); a create-if-absent checks on
its own whether a retried PUT landed (:mod:`firesteel.core.conditional_put`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from firesteel.core.errors import StorageError
from firesteel.core.retry_window import RetryWindow

logger = logging.getLogger(__name__)

T = TypeVar("T")

SETTING_SUFFIX = "retry.timeout.ms"
"""The window's setting, after the store's prefix: ``fs.s3a.retry.timeout.ms``."""
DEFAULT_TIMEOUT_S = 60.0

TRANSIENT = (
    # pyarrow's AWS SDK and libcurl: no connection, a connection dropped, a timeout.
    "NETWORK_CONNECTION",
    "curlCode",
    "Could not connect",
    "Couldn't connect",
    "Connection reset",
    "Connection refused",
    "timed out",
    "REQUEST_TIMEOUT",
    # The store is up but overloaded or restarting.
    "SLOW_DOWN",
    "SlowDown",
    "SERVICE_UNAVAILABLE",
    "ServiceUnavailable",
    "INTERNAL_FAILURE",
    "InternalError",
    "THROTTLING",
)


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` says the store could not be reached or was briefly unable to serve,
    so the same call may succeed later (never: missing bucket or key, refused credentials)."""
    if isinstance(error, StorageError | FileNotFoundError | FileExistsError | PermissionError):
        return False
    text = str(error)
    return any(marker in text for marker in TRANSIENT)


@dataclass(frozen=True)
class StoreRetry:
    """The retry window of one store: where it is and which setting bounds the wait."""

    endpoint: str
    """The store's endpoint as errors name it (``endpoint http://127.0.0.1:9000``)."""
    setting: str
    """The window's setting (``fs.s3a.retry.timeout.ms``)."""
    endpoint_setting: str
    """The setting naming the endpoint (``fs.s3a.endpoint``), the other fix."""
    timeout_s: float = DEFAULT_TIMEOUT_S

    def run(
        self,
        call: Callable[[], T],
        what: str,
        transient: Callable[[BaseException], bool] = is_transient,
    ) -> T:
        """``call()``, sent again while it fails with a ``transient`` error, until the window
        has passed; ``what`` (``write s3://b/k``) names the call in the log and the error.

        ``call`` must be safe to run twice: an attempt whose answer was lost may
        have been applied.
        """
        window = RetryWindow(self.timeout_s)
        window.open()
        while True:
            try:
                return call()
            except Exception as exc:
                if not transient(exc):
                    raise
                if window.expired:
                    raise self.exhausted(what, exc) from exc
                left = window.left
                pause = window.next_wait()
                logger.warning(
                    "firesteel: cannot %s: %s did not answer (%s); trying again in %.1f s, "
                    "for %.0f s more (%s=%d)",
                    what,
                    self.endpoint,
                    _first_line(exc),
                    pause,
                    left,
                    self.setting,
                    self.timeout_s * 1000,
                )
                time.sleep(pause)

    def exhausted(self, what: str, error: BaseException) -> StorageError:
        """The error of a call that still failed when the window ended."""
        msg = (
            f"cannot {what}: cannot reach {self.endpoint} for {self.timeout_s:.0f} s "
            f"({self.setting}={self.timeout_s * 1000:.0f}; last error: {_first_line(error)}). "
            f"Check that the store is up and {self.endpoint_setting} names it, or raise "
            f"{self.setting} to ride out longer outages"
        )
        return StorageError(msg)


def _first_line(error: BaseException) -> str:
    """The first line of ``error``, without a request id (it helps no user)."""
    text = str(error) or type(error).__name__
    return text.splitlines()[0].split(" (Request ID")[0]
