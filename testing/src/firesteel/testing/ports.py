"""TCP ports on 127.0.0.1 for the services tests start (brokers, masters, servers): a free
one to start on, and the wait until a started process listens on it."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now.

    The port is released before returning, so another process may take it before
    the caller binds it; callers that start a server retry with a new port on a
    bind failure.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class NotListeningError(RuntimeError):
    """A started process exited, or did not listen on its port in time."""


def await_listening(
    process: subprocess.Popen[bytes],
    port: int,
    timeout: float,
    *,
    what: str,
    log: Path | None = None,
    probe: float = 0.5,
    interval: float = 0.05,
) -> None:
    """Return once ``process`` accepts connections on ``port``.

    Tries to connect every ``interval`` seconds (each try waits ``probe`` seconds at
    most). Raises :class:`NotListeningError` naming ``what`` (and its ``log``) as soon
    as the process has exited, or after ``timeout`` seconds with the process still
    running; the caller then ends the process its own way.
    """
    see = f"; see {log}" if log is not None else ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            msg = f"{what} exited with {process.returncode}{see}"
            raise NotListeningError(msg)
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), probe):
            return
        time.sleep(interval)
    msg = f"{what} did not listen on {port} within {timeout}s{see}"
    raise NotListeningError(msg)
