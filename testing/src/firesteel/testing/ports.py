"""Free TCP ports on 127.0.0.1 for the services tests start (brokers, masters, servers)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now.

    The port is released before returning, so another process may take it before
    the caller binds it; callers that start a server retry with a new port on a
    bind failure.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
