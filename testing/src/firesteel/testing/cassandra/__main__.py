"""``python -m firesteel.testing.cassandra PORT``: run the CQL test server until killed."""

from __future__ import annotations

import sys

from firesteel.testing.cassandra.server import CqlServer


def main(argv: list[str]) -> None:
    """Serve on 127.0.0.1:PORT in the foreground."""
    server = CqlServer(("127.0.0.1", int(argv[1])))
    sys.stdout.write(f"listening {server.port}\n")
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv)
