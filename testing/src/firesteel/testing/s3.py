"""An S3 API server process on 127.0.0.1 for tests: moto's server mode, started and stopped by PID.

Real parts only: firesteel reaches it through ``pyarrow.fs.S3FileSystem``, the
tests read back with boto3, both over HTTP to a separate process that speaks the
S3 REST protocol (conditional PUT included).

moto keeps objects in memory only, and its request recorder cannot bring them
back (it records a request's body by ``Content-Length``, and pyarrow's AWS SDK
uploads with ``aws-chunked`` transfer encoding, which has none: the replayed
objects are empty). The server therefore runs behind a gate
(:mod:`firesteel.testing.s3_gate`): :meth:`S3Server.outage` closes it (at once,
or at a chosen request armed with :meth:`S3Server.arm`), reads every bucket and
object out with boto3 once nothing is in flight, kills the server by PID,
starts a new one on the same port with its gate closed, writes the objects back
and their modification times, and opens the gate. To a client, even one in
the middle of a job, the store went away and came back with its disks.

The server logs one line per request (method, path and query);
:class:`RequestLog` counts them by kind, so request economy is measured at the
server, not by the code under test.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from firesteel.core.errors import MissingDependencyError
from firesteel.testing.s3_gate import CONTROL, PASS_HEADER, PASS_VALUE
from firesteel.testing.servers import START_TIMEOUT_S, ServerProcess

if TYPE_CHECKING:
    from pyarrow import fs

ACCESS_KEY = "firesteel-test"
SECRET_KEY = "firesteel-test-secret"
REGION = "us-east-1"
SETTINGS_ENV = "FIRESTEEL_TEST_S3_SETTINGS"
"""A harness job's S3 settings (JSON of ``fs.s3a.*``), set by :meth:`S3Server.job_env`;
:func:`firesteel.testing.jobs.job_session` makes them the session's ``spark.hadoop.*``."""


class S3Server(ServerProcess):
    """One moto S3 server process; :meth:`settings` are the ``fs.s3a.*`` options reaching it.

    ``authenticate=True`` makes the server check credentials (moto's IAM mode), so
    wrong keys are refused as S3 refuses them.
    """

    name = "S3 server"
    log_name = "moto.log"
    probe = "/moto-api/"

    def __init__(self, workdir: Path, *, authenticate: bool = False) -> None:
        super().__init__(workdir)
        self.authenticate = authenticate
        self._closed_start = False

    def settings(self) -> dict[str, str]:
        """Sink/source options (Hadoop's names) that reach this server."""
        return {
            "fs.s3a.endpoint": self.endpoint,
            "fs.s3a.endpoint.region": REGION,
            "fs.s3a.access.key": ACCESS_KEY,
            "fs.s3a.secret.key": SECRET_KEY,
        }

    @staticmethod
    def spellings(bucket: str, path: str) -> Callable[[int], str]:
        """Restart ``run``'s spelling of ``s3://<bucket>/<path>``: ``s3a://`` and ``s3://``
        alternate (one object), as :class:`~firesteel.testing.checkpoint_spellings.Spellings` varies
        a local folder's."""
        return lambda run: f"{('s3a', 's3')[run % 2]}://{bucket}/{path}"

    def job_env(self) -> dict[str, str]:
        """Environment for a harness job whose session should reach this server through
        ``spark.hadoop.fs.s3a.*`` (see :data:`SETTINGS_ENV`)."""
        return {SETTINGS_ENV: json.dumps(self.settings())}

    def command(self) -> list[str]:
        if importlib.util.find_spec("moto") is None:
            package, distribution = "moto", "firesteel-testing"
            raise MissingDependencyError(package, distribution)
        command = [sys.executable, "-m", "firesteel.testing.s3_gate", "-H", "127.0.0.1"]
        return [*command, "-p", str(self.port), *(["--closed"] if self._closed_start else [])]

    def environment(self) -> dict[str, str]:
        env = super().environment()
        if self.authenticate:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
        return env

    def start(self) -> S3Server:
        super().start()
        return self

    def restart(self) -> None:
        """Kill the server by PID and start it again on the same port, holding the buckets
        and objects it held (see module docs): :meth:`outage` of no length."""
        self.outage(0.0)

    def arm(self, method: str, path: str, *, after: bool = False) -> None:
        """Make the next request with ``method`` whose path (``/bucket/key``) matches the
        regex ``path`` close the gate: before the store sees it, or ``after`` it was
        applied, its answer never sent. :meth:`outage` then starts there."""
        when = "after" if after else "before"
        query = urllib.parse.urlencode({"method": method, "path": path, "when": when})
        self._gate(f"arm?{query}", "POST")

    def closed(self) -> bool:
        """Whether the gate has closed (its trigger came) and no request is inside."""
        return self._gate("state") == "closed"

    def outage(self, seconds: float) -> float:
        """Stop serving for ``seconds``: close the gate (if an armed request has not yet),
        read the objects out, SIGKILL the server, and after ``seconds`` from the close
        start it on the same port with the same objects. Returns the seconds the port was
        closed (the server dead)."""
        if not self.closed():
            self._close_now()
        started = time.monotonic()
        saved, mtimes = self._objects()
        self.stop()
        down = time.monotonic()
        time.sleep(max(0.0, started + seconds - time.monotonic()))
        self._closed_start = True
        try:
            self.start()
        finally:
            self._closed_start = False
        up = time.monotonic()
        client = self.client()
        for name, objects in saved.items():
            client.create_bucket(Bucket=name)
            for key, body in objects.items():
                client.put_object(Bucket=name, Key=key, Body=body)
        self._gate("mtimes", "POST", json.dumps(mtimes).encode())
        self._gate("open", "POST")
        return up - down

    def _close_now(self) -> None:
        """Close the gate with no trigger: hold every request from now on."""
        self._gate("close", "POST")
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.closed():
            if time.monotonic() > deadline:
                msg = f"the {self.name} still had requests in flight after {START_TIMEOUT_S} s"
                raise RuntimeError(msg)
            time.sleep(0.02)

    def _objects(self) -> tuple[dict[str, dict[str, bytes]], dict[str, dict[str, float]]]:
        """Every object's bytes and modification time (epoch seconds), by bucket and key."""
        client = self.client()
        saved: dict[str, dict[str, bytes]] = {}
        mtimes: dict[str, dict[str, float]] = {}
        for bucket in client.list_buckets()["Buckets"]:
            name = bucket["Name"]
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=name)
            items = [item for page in pages for item in page.get("Contents", [])]
            saved[name] = {
                item["Key"]: client.get_object(Bucket=name, Key=item["Key"])["Body"].read()
                for item in items
            }
            mtimes[name] = {item["Key"]: item["LastModified"].timestamp() for item in items}
        return saved, mtimes

    def _gate(self, command: str, method: str = "GET", body: bytes | None = None) -> str:
        request = urllib.request.Request(
            f"{self.endpoint}{CONTROL}{command}", data=body, method=method
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return str(answer.read().decode())

    def client(self) -> Any:
        """A boto3 S3 client of this server: the reader that is not firesteel's."""
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )
        # Past the gate: the objects are read out of, and written into, a closed server.
        client.meta.events.register("before-sign.s3", _pass_the_gate)
        return client

    def filesystem(self) -> fs.S3FileSystem:
        """pyarrow's own S3 filesystem of this server (``pyarrow.fs.S3FileSystem``), built
        here and not through firesteel's storage layer: a reader (or writer) that is not
        firesteel's."""
        from pyarrow.fs import S3FileSystem

        return S3FileSystem(
            endpoint_override=self.endpoint.removeprefix("http://"),
            scheme="http",
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            region=REGION,
        )

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name``; returns it."""
        self.client().create_bucket(Bucket=name)
        return name


def _pass_the_gate(request: Any, **_: Any) -> None:
    request.headers[PASS_HEADER] = PASS_VALUE


_REQUEST = re.compile(r'"(GET|PUT|POST|DELETE|HEAD) (/[^ ?]*)(\?[^ ]*)? HTTP/[0-9.]+" (\d{3})')
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
"""The terminal colours the server's log gives some lines."""
KINDS = ("LIST", "GET", "HEAD", "PUT", "DELETE", "POST")


@dataclass
class RequestLog:
    """Counts the requests an :class:`S3Server` served, from its log, by kind.

    ``LIST`` is a GET of a bucket with a listing query (``list-type``,
    ``prefix``, ``delimiter``); ``DELETE`` counts single deletes and multi-object
    delete POSTs (``?delete``) alike; ``POST`` is the rest (multipart uploads).
    Only requests to ``bucket`` count (the server's own ``/moto-api`` never does).
    """

    server: S3Server
    bucket: str
    offset: int = 0

    def mark(self) -> None:
        """Count from now on."""
        self.offset = self.server.log.stat().st_size

    def take(self) -> Counter[str]:
        """The requests since the last mark, by kind; marks again."""
        with self.server.log.open("rb") as log:
            log.seek(self.offset)
            data = log.read()
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits
        self.offset += len(complete)
        counts: Counter[str] = Counter()
        text = _COLOUR.sub("", complete.decode("utf-8", errors="replace"))
        for match in _REQUEST.finditer(text):
            method, path, query, _status = match.groups()
            if path.strip("/").split("/", 1)[0] != self.bucket:
                continue
            counts[_kind(method, path, query or "")] += 1
        return counts


def _kind(method: str, path: str, query: str) -> str:
    if method == "GET" and "/" not in path.strip("/") and query:
        return "LIST"
    if method == "POST" and "delete" in query:
        return "DELETE"
    return method
