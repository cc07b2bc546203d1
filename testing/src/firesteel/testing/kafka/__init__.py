"""Test and benchmark helpers: a local Apache Kafka broker process and transaction checkers.

:func:`kafka_cluster` yields a bootstrap address: the cluster
``FIRESTEEL_KAFKA_BOOTSTRAP`` names, else a single-node KRaft broker
(:class:`ApacheKafkaBroker`: config/data/logs in a temp dir, free ports on
127.0.0.1, stopped by PID) from the distribution
:func:`~firesteel.testing.kafka.distribution.find_kafka` finds or downloads.
There is no fallback to a lesser broker.

:func:`read_committed` reads a topic as a plain ``read_committed`` consumer,
trusting the broker's isolation: the primary exactly-once checker.
:func:`read_log` is the second one (:mod:`firesteel.testing.kafka.rawlog`). It
trusts no broker's isolation: it fetches the raw record batches with kafka-python and
applies the transaction control markers itself: a transactional record is visible once
a COMMIT marker of its producer follows it, never after an ABORT, and pending while
neither has. The crash tests require the two to agree.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from firesteel.testing.kafka.distribution import KAFKA_HOME_ENV, find_kafka
from firesteel.testing.kafka.rawlog import LogRecord, LogView, read_log
from firesteel.testing.ports import NotListeningError, await_listening, free_port
from firesteel.testing.processes import REAPER

__all__ = [
    "BOOTSTRAP_ENV",
    "KAFKA_HOME_ENV",
    "ApacheKafkaBroker",
    "LogRecord",
    "LogView",
    "create_topic",
    "delete_topic",
    "find_kafka",
    "free_port",
    "kafka_cluster",
    "produce",
    "read_committed",
    "read_log",
]

BOOTSTRAP_ENV = "FIRESTEEL_KAFKA_BOOTSTRAP"
"""Set to ``host:port`` to run tests against an existing (e.g. Apache Kafka) cluster."""


_SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
num.network.threads=2
num.io.threads=4
log.dirs={data}
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=10
min.insync.replicas=1
group.initial.rebalance.delay.ms=0
log.retention.check.interval.ms=5000
log.retention.ms=-1
"""
"""The test broker's settings. Time retention is off: tests write records stamped in 2023,
which a 7-day retention would delete within one check interval of their write."""


def _ports(config: Path) -> tuple[int, int]:
    """The broker and controller ports of a config :data:`_SERVER_PROPERTIES` wrote."""
    found = re.search(
        r"^listeners=PLAINTEXT://127\.0\.0\.1:(\d+),CONTROLLER://127\.0\.0\.1:(\d+)$",
        config.read_text(),
        re.MULTILINE,
    )
    if found is None:
        msg = f"{config} names no listeners this module wrote; remove its folder to start afresh"
        raise RuntimeError(msg)
    return int(found[1]), int(found[2])


def _cluster_id() -> str:
    """A random KRaft cluster id that ``kafka-storage.sh`` can take as an argument.

    An id is 16 random bytes in URL-safe base64, so one in 64 starts with ``-``, which
    the tool's argument parser reads as an option; Kafka's own ``Uuid.randomUuid``
    draws again in that case, and so does this.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _format(bin_dir: Path, config: Path, env: dict[str, str], timeout: float) -> None:
    """Format the log dir of ``config`` for a new single-node KRaft cluster."""
    cluster_id = _cluster_id()
    formatted = subprocess.run(
        [str(bin_dir / "kafka-storage.sh"), "format", "-t", cluster_id, "-c", str(config)],
        env=env,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    if formatted.returncode != 0:
        msg = f"kafka-storage.sh format failed: {formatted.stderr.decode()[-2000:]}"
        raise RuntimeError(msg)


@dataclass
class ApacheKafkaBroker:
    """A single-node KRaft Apache Kafka broker from ``KAFKA_HOME``; :meth:`stop` ends it by PID."""

    port: int
    process: subprocess.Popen[bytes]
    workdir: Path
    owned: bool = True
    """Whether :meth:`stop` removes ``workdir`` (a temp folder of :meth:`start`'s)."""
    home: Path | None = None
    """The distribution it runs from (:meth:`restart` starts it again from there)."""

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"

    @classmethod
    def start(
        cls, home: str | Path, timeout: float = 180.0, folder: Path | None = None
    ) -> ApacheKafkaBroker:
        """Start the broker, wait for its port.

        Its config, data and logs go in ``folder``, or in a temp folder that
        :meth:`stop` removes. A ``folder`` that already holds a broker's config
        and formatted data is started again as it was, on the same ports, with
        its topics and transactions (a paused soak resumes on it).

        Needs Java 11+ on ``PATH``. ``KAFKA_HEAP_OPTS`` overrides the heap
        (default ``-Xmx768M -Xms256M``). Raises :class:`RuntimeError` naming
        the log folder when the broker exits or its port stays closed.
        """
        bin_dir = Path(home) / "bin"
        if not (bin_dir / "kafka-server-start.sh").is_file():
            msg = f"{KAFKA_HOME_ENV}={home} holds no bin/kafka-server-start.sh (Apache Kafka 3.x)"
            raise RuntimeError(msg)
        workdir = folder or Path(tempfile.mkdtemp(prefix="firesteel-kafka-"))
        config = workdir / "server.properties"
        if config.is_file():
            port, controller = _ports(config)
        else:
            port, controller = free_port(), free_port()
            while controller == port:
                controller = free_port()
        (workdir / "logs").mkdir(parents=True, exist_ok=True)
        config.write_text(
            _SERVER_PROPERTIES.format(port=port, controller=controller, data=workdir / "data")
        )
        env = {
            **os.environ,
            "LOG_DIR": str(workdir / "logs"),
            "KAFKA_HEAP_OPTS": os.environ.get("KAFKA_HEAP_OPTS", "-Xmx768M -Xms256M"),
        }
        if not (workdir / "data" / "meta.properties").is_file():
            _format(bin_dir, config, env, timeout)
        log = workdir / "logs" / "broker.out"
        with log.open("wb") as out:
            # kafka-server-start.sh execs java, so the PID is the broker JVM's.
            process = subprocess.Popen(
                [str(bin_dir / "kafka-server-start.sh"), str(config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        REAPER.guard(process.pid)
        broker = cls(port, process, workdir, owned=folder is None, home=Path(home))
        try:
            await_listening(process, port, timeout, what="Apache Kafka", log=log, interval=0.2)
        except NotListeningError:
            if process.poll() is None:  # an exited broker keeps its folder: the log tells why
                broker.stop()
            raise
        return broker

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM the broker by PID, SIGKILL after ``grace`` seconds; remove its temp folder
        (a folder given to :meth:`start` stays)."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        REAPER.release(self.process.pid)
        if self.owned:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def restart(self, sig: signal.Signals = signal.SIGTERM, down: float = 0.0) -> ApacheKafkaBroker:
        """An outage: send ``sig`` to the broker by PID, wait for it to exit, stay down
        ``down`` seconds, then start it again on the same folder and ports.

        Returns the new broker (it owns the folder if this one did). A broker on a
        temp folder keeps the folder across the restart. The broker is unreachable
        from the signal until the new one listens: ``down`` plus its start, which
        after SIGKILL includes the recovery of its logs.
        """
        if self.home is None:
            msg = "this broker was not started by ApacheKafkaBroker.start: no distribution"
            raise RuntimeError(msg)
        os.kill(self.process.pid, sig)
        self.process.wait(60)
        time.sleep(down)
        broker = ApacheKafkaBroker.start(self.home, folder=self.workdir)
        broker.owned = self.owned
        return broker


@contextlib.contextmanager
def kafka_cluster(folder: Path | None = None, search: Sequence[Path] = ()) -> Iterator[str]:
    """Yield a bootstrap address and stop what it started.

    The cluster ``FIRESTEEL_KAFKA_BOOTSTRAP`` names, else a broker started from
    :func:`~firesteel.testing.kafka.distribution.find_kafka`'s distribution (which looks
    in ``search`` too, and raises saying what to set when there is none). ``folder``
    keeps the broker's config, data and logs, and a broker started on it again finds
    its topics (see :meth:`ApacheKafkaBroker.start`).
    """
    existing = os.environ.get(BOOTSTRAP_ENV)
    if existing:
        yield existing
        return
    broker = ApacheKafkaBroker.start(find_kafka(search).home, folder=folder)
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


def delete_topic(bootstrap: str, name: str, timeout: float = 60.0) -> None:
    """Delete a topic and wait until the cluster no longer lists it."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([name]).values():
        future.result(timeout)
    deadline = time.monotonic() + timeout
    while name in admin.list_topics(timeout=10).topics:
        if time.monotonic() > deadline:
            msg = f"topic {name} still listed {timeout}s after its deletion"
            raise RuntimeError(msg)
        time.sleep(0.2)


def produce(bootstrap: str, topic: str, values: list[bytes], **kwargs: Any) -> None:
    """Produce ``values`` (plain, idempotent, acks=all) and wait for every delivery report."""
    from confluent_kafka import Producer

    failures: list[str] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    for value in values:
        while True:
            try:
                producer.produce(
                    topic,
                    value,
                    on_delivery=lambda err, _m: failures.append(err.str()) if err else None,
                    **kwargs,
                )
                break
            except BufferError:  # librdkafka's queue is full: let deliveries drain it
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(60) or failures:
        msg = f"produce to {topic} failed: {failures[:3]}"
        raise RuntimeError(msg)


def _headers(message: Any) -> tuple[tuple[str, bytes], ...]:
    pairs: list[tuple[str, bytes | None]] = message.headers() or []
    return tuple((key, value or b"") for key, value in pairs)


def read_committed(bootstrap: str, topic: str, timeout: float = 60.0) -> list[LogRecord]:
    """Every record a plain ``read_committed`` consumer sees in ``topic``, by partition and offset.

    The broker's own isolation, beside :func:`read_log`'s raw-log view: the
    two must agree. Reads from
    the beginning of every partition up to its last stable offset.
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"firesteel-checker-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        partitions = list(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, -2) for p in partitions])
        pending = set(partitions)
        records: list[LogRecord] = []
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                msg = f"read_committed of {topic}: partitions {sorted(pending)} never reached EOF"
                raise RuntimeError(msg)
            for message in consumer.consume(1000, timeout=0.5):
                error = message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(message.partition())
                elif error is not None:
                    msg = f"read_committed of {topic}: {error.str()}"
                    raise RuntimeError(msg)
                else:
                    records.append(
                        LogRecord(
                            partition=int(message.partition() or 0),
                            offset=int(message.offset() or 0),
                            key=message.key(),
                            value=message.value(),
                            headers=_headers(message),
                            producer_id=-1,
                            transactional=False,
                        )
                    )
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()
