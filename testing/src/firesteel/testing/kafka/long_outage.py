"""A long outage of the broker and the object store at once, inside running exactly-once queries.

Usage::

    python -m firesteel.testing.kafka.long_outage [--down 90] [--records 2000] [--workdir DIR]

Starts a real Apache Kafka broker (:func:`~firesteel.testing.kafka.distribution.find_kafka`)
and the S3 server process of its own, and four exactly-once queries in one local
SparkSession:

- ``kafka``: Kafka -> Kafka (the default ``exactly.once.mode=write-ahead``), with the
  default ``retry.timeout.ms`` (2 min) on the source and the sink;
- ``kafka-long``: the same with ``retry.timeout.ms`` set past the outage;
- ``files-default``: local Parquet files -> the file sink on the S3 server, with the
  default ``fs.s3a.retry.timeout.ms`` (60 s); its source is local so that the store's
  outage, not the broker's, is what its commits meet;
- ``files-long``: the same with ``fs.s3a.retry.timeout.ms`` set past the outage.

Once every query has committed output, the broker is SIGKILLed and the S3 server
SIGKILLed (:meth:`~firesteel.testing.s3.S3Server.outage`, its objects kept) at the same
moment; both start again ``--down`` seconds later. The rest of the input is
written once both are back. A query whose window outlasts its server's outage (with 10 s
to spare) must ride it out; one whose window is shorter must fail with an error naming
its server and the setting, and is then restarted from its checkpoint. At the end a
plain ``read_committed`` consumer reads the Kafka outputs and pyarrow's dataset reader
the S3 outputs: every record exactly once. One JSON line reports how long each server
was unreachable, each query's fate and the counts; the exit status is 1 when a count or
a fate is wrong.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from firesteel.testing.jobs import suite_session
from firesteel.testing.kafka import (
    ApacheKafkaBroker,
    create_topic,
    find_kafka,
    produce,
    read_committed,
)
from firesteel.testing.s3 import S3Server

DEFAULT_DOWN = 90.0
KAFKA_WINDOW_MS = 120_000
"""The Kafka connector's default ``retry.timeout.ms`` (the queries leave it unset)."""
STORE_WINDOW_MS = 60_000
"""The default ``fs.s3a.retry.timeout.ms`` (``files-default`` leaves it unset)."""
PER_TRIGGER = "50"
PER_FILE = 50
SETTLE_S = 600.0
"""How long the queries may take to finish (or fail) once both servers are back."""


@dataclass
class Query:
    """One query of the scenario: how to start it, what its window is, what became of it."""

    name: str
    window_ms: int
    server: str
    """What its failure must name: the servers' option or the endpoint's setting."""
    setting: str
    start: Callable[[], Any]
    count: Callable[[], Counter[int]]
    handle: Any = None
    failure: str = ""
    restarted: bool = False
    fates: list[str] = field(default_factory=list)


def _failure_text(exc: BaseException | None) -> str:
    """A failed query's error with its JVM causes (a sink's text is only in the causes)."""
    texts = []
    while exc is not None:
        texts += [str(exc), str(getattr(exc, "_stackTrace", "") or "")]
        exc = getattr(exc, "_cause", None)
    return "\n".join(texts)


def _both_down(broker: ApacheKafkaBroker, s3: S3Server, down: float) -> dict[str, Any]:
    """SIGKILL the broker and the S3 server together; both back after ``down`` s."""
    result: dict[str, Any] = {}

    def broker_outage() -> None:
        killed = time.monotonic()
        result["broker"] = broker.restart(signal.SIGKILL, down)
        result["broker_unreachable_s"] = round(time.monotonic() - killed, 1)

    def store_outage() -> None:
        result["s3_unreachable_s"] = round(s3.outage(down), 1)

    threads = [threading.Thread(target=broker_outage), threading.Thread(target=store_outage)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return result


def _with(builder: Any, settings: dict[str, str]) -> Any:
    """``builder`` (a stream reader or writer) with ``settings`` as options."""
    for key, value in settings.items():
        builder = builder.option(key, value)
    return builder


def _write_files(folder: Path, start: int, end: int) -> None:
    """Parquet files of :data:`PER_FILE` sequence numbers each, ``start .. end - 1``, each
    written beside the folder and moved in whole, as a file source expects."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    for first in range(start, end, PER_FILE):
        seqs = list(range(first, min(first + PER_FILE, end)))
        staged = folder.parent / f".staged-{first}.parquet"
        pq.write_table(pa.table({"seq": pa.array(seqs, pa.int64())}), staged)
        staged.replace(folder / f"part-{first:08d}.parquet")


def _seqs(values: Sequence[bytes]) -> Counter[int]:
    return Counter(int(v.decode()) for v in values)


def run(down: float, records: int, workdir: Path) -> dict[str, Any]:
    """The scenario (see module docs); its report."""
    from pyarrow import dataset as ds

    broker = ApacheKafkaBroker.start(find_kafka().home, folder=workdir / "broker")
    s3 = S3Server(workdir / "s3").start()
    spark = None
    try:
        bootstrap = broker.bootstrap
        source = create_topic(bootstrap, 2)
        targets = {name: create_topic(bootstrap, 2) for name in ("kafka", "kafka-long")}
        bucket = s3.create_bucket("long-outage")
        inputs = workdir / "in"
        produce(bootstrap, source, [str(i).encode() for i in range(records // 2)])
        _write_files(inputs, 0, records // 2)
        spark = suite_session("firesteel-long-outage")

        def read() -> Any:
            return (
                spark.readStream.format("firesteel.kafka")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", source)
                .option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", PER_TRIGGER)
            )

        def kafka_query(name: str, settings: dict[str, str]) -> Callable[[], Any]:
            def start() -> Any:
                checkpoint = str(workdir / f"ck-{name}")
                reader = read().option("checkpointLocation", checkpoint)
                writer = (
                    _with(reader, settings)
                    .load()
                    .selectExpr("value")
                    .writeStream.format("firesteel.kafka")
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("topic", targets[name])
                    .option("guarantee", "exactly-once")
                    .option("checkpointLocation", checkpoint)
                    .trigger(processingTime="1 second")
                )
                return _with(writer, settings).start()

            return start

        def files_query(name: str, settings: dict[str, str]) -> Callable[[], Any]:
            def start() -> Any:
                checkpoint = str(workdir / f"ck-{name}")
                writer = (
                    spark.readStream.format("firesteel.files")
                    .option("format", "parquet")
                    .option("max.files.per.batch", "2")
                    .load(str(inputs))
                    .writeStream.format("firesteel.files")
                    .option("path", f"s3a://{bucket}/{name}")
                    .option("format", "parquet")
                    .option("guarantee", "exactly-once")
                    .option("checkpointLocation", checkpoint)
                    .trigger(processingTime="1 second")
                )
                return _with(writer, {**s3.settings(), **settings}).start()

            return start

        def kafka_count(name: str) -> Callable[[], Counter[int]]:
            def count() -> Counter[int]:
                records = read_committed(broker.bootstrap, targets[name])
                return _seqs([r.value for r in records if r.value])

            return count

        def files_count(name: str) -> Callable[[], Counter[int]]:
            def count() -> Counter[int]:
                table = ds.dataset(
                    f"{bucket}/{name}", format="parquet", filesystem=s3.filesystem()
                ).to_table()
                return Counter(table.column("seq").to_pylist())

            return count

        long_ms = int((down * 2 + 60) * 1000)
        servers = f"option 'kafka.bootstrap.servers' ({bootstrap})"
        queries = [
            Query(
                "kafka",
                KAFKA_WINDOW_MS,
                servers,
                "option 'retry.timeout.ms'",
                kafka_query("kafka", {}),
                kafka_count("kafka"),
            ),
            Query(
                "kafka-long",
                long_ms,
                servers,
                "option 'retry.timeout.ms'",
                kafka_query("kafka-long", {"retry.timeout.ms": str(long_ms)}),
                kafka_count("kafka-long"),
            ),
            Query(
                "files-default",
                STORE_WINDOW_MS,
                s3.endpoint,
                "fs.s3a.retry.timeout.ms",
                files_query("files-default", {}),
                files_count("files-default"),
            ),
            Query(
                "files-long",
                long_ms,
                s3.endpoint,
                "fs.s3a.retry.timeout.ms",
                files_query("files-long", {"fs.s3a.retry.timeout.ms": str(long_ms)}),
                files_count("files-long"),
            ),
        ]
        for query in queries:
            query.handle = query.start()
        _wait(queries, lambda q: sum(q.count().values()) > 0, "first output")
        outage = _both_down(broker, s3, down)
        broker = outage.pop("broker")
        produce(broker.bootstrap, source, [str(i).encode() for i in range(records // 2, records)])
        _write_files(inputs, records // 2, records)
        _settle(queries, records)
        report: dict[str, Any] = {"down_s": down, "records": records, **outage}
        unreachable = {
            "kafka": outage["broker_unreachable_s"],
            "kafka-long": outage["broker_unreachable_s"],
            "files-default": outage["s3_unreachable_s"],
            "files-long": outage["s3_unreachable_s"],
        }
        ok = True
        for query in queries:
            seen = query.count()
            lost = sum(1 for i in range(records) if i not in seen)
            twice = sum(1 for n in seen.values() if n > 1)
            named = not query.failure or (
                query.server in query.failure and query.setting in query.failure
            )
            report[query.name] = {
                "window_s": query.window_ms / 1000,
                "fate": query.fates,
                "lost": lost,
                "duplicated": twice,
                "failure_names_server_and_setting": named,
                "failure": _first_line(query.failure),
            }
            # A window longer than the outage (with a start's margin) must be ridden out.
            must_survive = query.window_ms / 1000 > unreachable[query.name] + 10
            survived = not query.failure
            report[query.name]["must_survive"] = must_survive
            ok = ok and lost == 0 and twice == 0 and named and (survived or not must_survive)
        report["ok"] = ok
        return report
    finally:
        if spark is not None:
            for active in spark.streams.active:
                active.stop()
            spark.stop()
        s3.stop()
        broker.stop()


def _first_line(text: str) -> str:
    """The line of a failure that names the cause (a firesteel error), else its first."""
    lines = [line for line in text.splitlines() if "Error:" in line and "firesteel" in line]
    return (lines or text.splitlines() or [""])[0].strip()[:400]


def _wait(queries: list[Query], done: Callable[[Query], bool], what: str) -> None:
    deadline = time.monotonic() + SETTLE_S
    while not all(done(q) for q in queries):
        for query in queries:
            if not query.handle.isActive:
                error = query.handle.exception()
                msg = f"query {query.name} stopped while waiting for {what}: {error}"
                raise RuntimeError(msg)
        if time.monotonic() > deadline:
            msg = f"timed out waiting for {what}"
            raise RuntimeError(msg)
        time.sleep(1.0)


def _settle(queries: list[Query], records: int) -> None:
    """Wait until every query wrote every record; a query that failed is recorded and
    restarted once from its checkpoint."""
    deadline = time.monotonic() + SETTLE_S
    pending = list(queries)
    while pending:
        for query in list(pending):
            if not query.handle.isActive:
                if query.restarted:
                    msg = f"query {query.name} failed again after its restart: {query.failure}"
                    raise RuntimeError(msg)
                query.failure = _failure_text(query.handle.exception())
                query.fates.append("failed")
                query.restarted = True
                query.handle = query.start()
                query.fates.append("restarted")
            elif sum(query.count().values()) >= records:
                query.fates.append(
                    "completed" if not query.restarted else "completed after restart"
                )
                query.handle.stop()
                pending.remove(query)
        if time.monotonic() > deadline:
            msg = f"timed out: {[q.name for q in pending]} never wrote all {records} records"
            raise RuntimeError(msg)
        time.sleep(2.0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m firesteel.testing.kafka.long_outage")
    parser.add_argument("--down", type=float, default=DEFAULT_DOWN, help="seconds both stay down")
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="firesteel-long-outage-"))
    report = run(args.down, args.records, workdir)
    sys.stdout.write(json.dumps(report) + "\n")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
