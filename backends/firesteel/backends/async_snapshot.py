"""A snapshot serialized and uploaded on a thread beside the task's output.

Shared by the backends: the task hands its snapshot work to
:class:`SnapshotThread` and goes on producing output; the operator calls
:meth:`SnapshotThread.wait` before the task ends, so the snapshot is durable
before the task's vote (an error in the thread is raised there).
"""

from __future__ import annotations

import threading
from typing import Any

from firesteel.state.backend import PendingSnapshot


class SnapshotThread(PendingSnapshot):
    """Runs the serialization and upload of one snapshot beside the task's output."""

    def __init__(self, work: Any) -> None:
        self._error: BaseException | None = None
        self._work = work
        self._thread = threading.Thread(target=self._run, name="firesteel-snapshot", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._work()
        except BaseException as exc:  # re-raised in wait(), on the task thread
            self._error = exc

    def wait(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error
