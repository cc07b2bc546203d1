"""An S3 API server process on 127.0.0.1 for tests: moto's server mode, started and stopped by PID.

Real parts only: firesteel reaches it through ``pyarrow.fs.S3FileSystem``, the
tests read back with boto3, both over HTTP to a separate process that speaks the
S3 REST protocol (conditional PUT included).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from firesteel.core.errors import MissingDependencyError
from firesteel.testing.ports import free_port
from firesteel.testing.processes import spawn_logged

ACCESS_KEY = "firesteel-test"
SECRET_KEY = "firesteel-test-secret"
REGION = "us-east-1"
START_TIMEOUT_S = 30.0


class S3Server:
    """One moto S3 server process; :meth:`settings` are the ``fs.s3a.*`` options reaching it.

    ``authenticate=True`` makes the server check credentials (moto's IAM mode), so
    wrong keys are refused as S3 refuses them.
    """

    def __init__(self, workdir: Path, *, authenticate: bool = False) -> None:
        self.workdir = workdir
        self.authenticate = authenticate
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def settings(self) -> dict[str, str]:
        """Sink/source options (Hadoop's names) that reach this server."""
        return {
            "fs.s3a.endpoint": self.endpoint,
            "fs.s3a.endpoint.region": REGION,
            "fs.s3a.access.key": ACCESS_KEY,
            "fs.s3a.secret.key": SECRET_KEY,
        }

    def start(self, port: int = 0) -> S3Server:
        """Start the server on ``port`` (default: a free one) and wait until it answers."""
        command = shutil.which("moto_server", path=str(Path(sys.executable).parent))
        if command is None:
            package, distribution = "moto", "firesteel-testing"
            raise MissingDependencyError(package, distribution)
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        if self.authenticate:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
        self.port = port or free_port()
        self.process = spawn_logged(
            [command, "-H", "127.0.0.1", "-p", str(self.port)], self.workdir / "moto.log", env
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.workdir / "moto.log").read_text(errors="replace")[-2000:]
                msg = f"the S3 server exited with {self.process.returncode}: {log}"
                raise RuntimeError(msg)
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2):
                    return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        self.stop()
        msg = f"the S3 server did not answer on {self.endpoint} within {START_TIMEOUT_S:.0f} s"
        raise RuntimeError(msg)

    def client(self) -> Any:
        """A boto3 S3 client of this server: the reader that is not firesteel's."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name``; returns it."""
        self.client().create_bucket(Bucket=name)
        return name

    def restart(self) -> None:
        """Kill the server by PID and start a new one on the same port holding the same objects.

        moto keeps its state in memory and has no on-disk mode (its request
        recorder replays requests, but not multipart uploads, whose ids are
        random, and pyarrow uploads every object that way). So the objects are
        saved with boto3, the process killed, and they are put back into the
        new one; call it while no client is writing (between a job's kill and
        its restart). To the restarted job this is what a durable store's
        outage looks like. Every acknowledged object survives; uploads in
        flight do not; LastModified times change.
        """
        client = self.client()
        saved: dict[str, list[tuple[str, bytes]]] = {}
        for bucket in client.list_buckets()["Buckets"]:
            name = bucket["Name"]
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=name)
            saved[name] = [
                (item["Key"], client.get_object(Bucket=name, Key=item["Key"])["Body"].read())
                for page in pages
                for item in page.get("Contents", [])
            ]
        port = self.port
        self.stop()
        self.start(port)
        client = self.client()
        for name, objects in saved.items():
            client.create_bucket(Bucket=name)
            for key, body in objects:
                client.put_object(Bucket=name, Key=key, Body=body)

    def stop(self) -> None:
        """Kill the server by PID and reap it."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None
