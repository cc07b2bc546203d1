"""moto's S3 server behind a gate that can stop serving at an exact request, for outage tests.

Run as ``python -m firesteel.testing.s3_gate -H 127.0.0.1 -p PORT [--closed]``
(:class:`~firesteel.testing.s3.S3Server` does). The gate holds requests
while it is closed (``--closed``: from the start) and is driven over HTTP:

* ``POST /_gate/arm?method=GET&path=<regex>&when=before|after``: the next
  request whose method and path match closes the gate, ``before`` it reaches
  the store (never applied) or ``after`` (applied, its answer never sent: the
  case a client's retry must handle). Requests already inside finish; every
  later one, and the trigger, wait.
* ``GET /_gate/state``: ``open``, ``armed`` or ``closed`` (closed once nothing
  is in flight: the objects can be read out consistently).
* ``POST /_gate/close``: close now (requests inside finish, later ones wait).
* ``POST /_gate/open``: serve again.
* ``POST /_gate/mtimes`` with ``{"<bucket>": {"<key>": <epoch seconds>}}``: give
  restored objects the modification times they had (a reader that checks them,
  as the file source does, sees the store it knew).

A request with the header ``x-firesteel-gate: pass`` (the tests' own boto3
client) and moto's ``/moto-api/`` pass the gate always, so the objects can be
read out of a closed server and written into one started closed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

CONTROL = "/_gate/"
PASS_HEADER = "x-firesteel-gate"
PASS_VALUE = "pass"

StartResponse = Callable[..., Any]
App = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


@dataclass(frozen=True)
class Trigger:
    """The request that closes the gate."""

    method: str
    path: re.Pattern[str]
    after: bool


class Gate:
    """WSGI middleware in front of moto's application (see the module docs)."""

    def __init__(self, app: App, *, closed: bool) -> None:
        self.app = app
        self.condition = threading.Condition()
        self.open = not closed
        self.in_flight = 0
        self.trigger: Trigger | None = None

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path.startswith(CONTROL):
            return self._control(path[len(CONTROL) :], environ, start_response)
        if path.startswith("/moto-api") or environ.get("HTTP_X_FIRESTEEL_GATE") == PASS_VALUE:
            return self.app(environ, start_response)
        method = environ.get("REQUEST_METHOD", "")
        with self.condition:
            self._wait_open()
            trigger = self.trigger
            fires = trigger is not None and trigger.method == method and trigger.path.search(path)
            if fires and trigger is not None and not trigger.after:
                self.trigger = None
                self._close_and_hold()
            self.in_flight += 1
        try:
            answer = list(self.app(environ, start_response))
        finally:
            with self.condition:
                self.in_flight -= 1
                self.condition.notify_all()
        if fires:
            with self.condition:
                self.trigger = None
                self._close_and_hold()
        return answer

    def _wait_open(self) -> None:
        while not self.open:
            self.condition.wait()

    def _close_and_hold(self) -> None:
        """Close the gate and hold the calling request until the process is killed (or the
        gate opens again)."""
        self.open = False
        self.condition.notify_all()
        self._wait_open()

    def state(self) -> str:
        """``open``, ``armed``, or ``closed`` once no request is inside."""
        with self.condition:
            if self.open:
                return "armed" if self.trigger is not None else "open"
            return "closed" if self.in_flight == 0 else "closing"

    def _control(
        self, command: str, environ: dict[str, Any], start_response: StartResponse
    ) -> Iterable[bytes]:
        query = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        if command == "arm":
            with self.condition:
                self.trigger = Trigger(
                    query["method"].upper(), re.compile(query["path"]), query["when"] == "after"
                )
        elif command == "close":
            with self.condition:
                self.open = False
                self.trigger = None
        elif command == "mtimes":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            _set_mtimes(json.loads(environ["wsgi.input"].read(length)))
        elif command == "open":
            with self.condition:
                self.open = True
                self.condition.notify_all()
        elif command != "state":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"unknown gate command"]
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [self.state().encode()]


def _set_mtimes(mtimes: dict[str, dict[str, float]]) -> None:
    from moto.s3.models import s3_backends

    for regions in s3_backends.values():
        for backend in regions.values():
            for name, keys in mtimes.items():
                bucket = backend.buckets.get(name)
                for key, seconds in keys.items():
                    stored = bucket.keys.get(key) if bucket is not None else None
                    if stored is not None:
                        # moto keeps naive UTC times.
                        moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
                        stored.last_modified = moment.replace(tzinfo=None)


def main(argv: list[str] | None = None) -> None:
    """Serve moto's S3 API behind a :class:`Gate` until killed."""
    from moto.moto_server.threaded_moto_server import MotoRequestHandler
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import run_simple

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    parser.add_argument("--closed", action="store_true", help="hold requests until opened")
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(
        args.host,
        args.port,
        Gate(app, closed=args.closed),
        threaded=True,
        request_handler=MotoRequestHandler,
    )


if __name__ == "__main__":
    main()
