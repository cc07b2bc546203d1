"""A TCP proxy on 127.0.0.1 that can drop every connection for a while: a store refusing requests.

An object store that throttles, fails over or loses its network looks to a
client like connections reset in the middle of requests. :class:`DroppingProxy`
stands between the real client (pyarrow's AWS SDK in a Spark job) and the real
server (the S3 server process) and forwards bytes unchanged, so both speak their
own protocol; while :meth:`DroppingProxy.refusing` is in force it resets every
open connection and every new one. Threads in the test's process, no server of
its own to start or stop by PID.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
from collections.abc import Iterator
from types import TracebackType

logger = logging.getLogger(__name__)

_BUFFER = 64 * 1024


class DroppingProxy:
    """Forwards ``127.0.0.1:<port>`` to ``127.0.0.1:<target_port>``; see the module docs.

    Use as a context manager (or :meth:`start` / :meth:`stop`); :attr:`endpoint` is
    the URL clients use instead of the server's.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._refusing = threading.Event()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._acceptor = threading.Thread(target=self._accept, name="dropping-proxy", daemon=True)
        self.dropped = 0
        """Connections reset so far."""

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``: the proxy's address in the form the S3 settings take."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> DroppingProxy:
        """Start accepting connections."""
        self._acceptor.start()
        return self

    def stop(self) -> None:
        """Stop accepting and close every connection."""
        self._stopped.set()
        self._listener.close()
        self._reset_open()
        self._acceptor.join(timeout=10)

    def __enter__(self) -> DroppingProxy:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    @contextlib.contextmanager
    def refusing(self) -> Iterator[None]:
        """While inside: every open connection is reset, and every new one at once."""
        self._refusing.set()
        self._reset_open()
        logger.info("proxy :%d refusing connections", self.port)
        try:
            yield
        finally:
            self._refusing.clear()
            logger.info("proxy :%d forwarding again (%d dropped)", self.port, self.dropped)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._refusing.is_set():
                self._reset(client)
                continue
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
            except OSError:
                self._reset(client)
                continue
            server.settimeout(None)
            with self._lock:
                self._open.update((client, server))
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(_BUFFER):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                self._close(end)

    def _reset_open(self) -> None:
        with self._lock:
            ends = list(self._open)
        for end in ends:
            self._reset(end)

    def _reset(self, end: socket.socket) -> None:
        """Close with a TCP reset (linger 0), as a dropped connection looks to its peer; the
        shutdown wakes the pump thread blocked reading it."""
        with contextlib.suppress(OSError):
            end.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            end.shutdown(socket.SHUT_RDWR)
        self.dropped += 1
        self._close(end)

    def _close(self, end: socket.socket) -> None:
        with self._lock:
            self._open.discard(end)
        with contextlib.suppress(OSError):
            end.close()
