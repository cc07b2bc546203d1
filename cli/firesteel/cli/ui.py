"""``firesteel ui CHECKPOINT...``: one local web page showing how each query is doing.

The page reads ``/status.json`` (what ``firesteel status --json`` prints, for every
checkpoint given) every few seconds and draws, per query, its guarantee and last committed
batch, and per sink the rows of each recorded batch, the slowest task's write time and the
commit's time, each batch's phases stacked (the slowest task's read, process and write, the
commit's parts, each operator's snapshot), a checkpoint history table (Flink's: duration,
snapshot time and bytes written, state size, batch by batch), and the committed totals.
Given a pipeline's work folder (``firesteel run-local --work``), the page draws the
pipeline's topology first (its streamlets, and per topic an arrow from each producer to each
consumer labelled with the consumer's lag), a table of the streamlets' progress, then each
streamlet's queries as above. The page is self-contained (no script or font from the
network), served on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from firesteel.cli.args import EXIT_USAGE, command_parser
from firesteel.cli.status import (
    is_pipeline_work,
    pipeline_status,
    query_status,
    require_checkpoint,
)

__all__ = ["main", "serve"]


def _handler(checkpoints: list[str], last: int) -> type[BaseHTTPRequestHandler]:
    # Beside this module in the source tree and in the wheel (package data); firesteel.cli
    # is a namespace package, which importlib.resources cannot open files of on 3.10-3.11.
    page = (Path(__file__).parent / "ui.html").read_bytes()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/":
                self._send(200, "text/html; charset=utf-8", page)
            elif self.path == "/status.json":
                try:
                    shown = [s for c in checkpoints for s in _statuses(c, last)]
                    self._send(200, "application/json", json.dumps(shown).encode())
                except FileNotFoundError as exc:
                    self._send(404, "text/plain; charset=utf-8", str(exc).encode())
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found")

        def _send(self, code: int, kind: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Requests are not worth a line each on the console."""

    return Handler


def _statuses(location: str, last: int) -> list[dict[str, Any]]:
    """A query's status; for a pipeline's work folder, the pipeline's (its streamlets and
    topics) and then each of its queries'."""
    if not is_pipeline_work(location):
        return [query_status(location, last)]
    pipeline = pipeline_status(location)
    queries = [c for streamlet in pipeline["streamlets"] for c in streamlet["checkpoints"]]
    return [pipeline, *(query_status(c, last) for c in queries)]


def serve(checkpoints: list[str], port: int = 0, last: int = 50) -> ThreadingHTTPServer:
    """Serve the page for ``checkpoints`` on ``127.0.0.1:port`` (0: a free port) from a
    daemon thread; ``server_address`` says where, ``shutdown()`` stops it."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(checkpoints, last))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: list[str]) -> int:
    """Run ``firesteel ui`` until interrupted; 2 when a location is not a checkpoint."""
    parser = command_parser(
        "firesteel ui",
        (__doc__ or "").split("\n\n")[1],
        "firesteel ui /tmp/firesteel-demo/checkpoint --port 8765",
    )
    parser.add_argument(
        "checkpoint", nargs="+", help="a query's checkpoint location, or a pipeline's work folder"
    )
    parser.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (8765)")
    parser.add_argument("--last", type=int, default=50, help="batches shown per sink (50)")
    args = parser.parse_args(argv)
    for checkpoint in args.checkpoint:
        if is_pipeline_work(checkpoint):
            continue
        try:
            require_checkpoint(checkpoint)
        except FileNotFoundError as exc:
            parser.exit(EXIT_USAGE, f"{parser.prog}: error: {exc}\n")
    server = serve(args.checkpoint, args.port, args.last)
    port = server.server_address[1]
    sys.stdout.write(f"firesteel ui: http://127.0.0.1:{port}/ (Ctrl-C stops it)\n")
    sys.stdout.flush()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        return 0
    finally:
        server.shutdown()
    return 0
