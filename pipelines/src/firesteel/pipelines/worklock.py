"""One runner per work folder: a lock file naming the runner that holds it.

Two runners on one work folder would run every streamlet twice against the
same checkpoints and topics. The runner holds an exclusive ``flock`` on
``<work>/runner.lock`` while it runs and writes its PID and host there; the
kernel drops the lock when the process ends however it ends, so a dead runner
never leaves a stale lock (on a shared mount, as far as the file system
implements ``flock``).
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path
from typing import IO

from firesteel.core import FiresteelError

LOCK_FILE = "runner.lock"


class WorkFolderInUseError(FiresteelError):
    """Another runner holds the work folder; names its PID and host."""


class WorkLock:
    """The exclusive hold of one runner on a work folder."""

    def __init__(self, work: Path) -> None:
        self.path = work / LOCK_FILE
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        """Hold the work folder, or raise WorkFolderInUseError naming its holder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # noqa: SIM115 - held open for the runner's lifetime
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "a runner that has not written its PID yet"
            handle.close()
            msg = (
                f"work folder {self.path.parent} is in use by another runner ({holder}): "
                "stop it first, or give this run another --work folder"
            )
            raise WorkFolderInUseError(msg) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on host {socket.gethostname()}\n")
        handle.flush()
        self._file = handle

    def release(self) -> None:
        """Let another runner have the folder (the file stays; only the lock matters)."""
        if self._file is not None:
            self._file.close()
            self._file = None
