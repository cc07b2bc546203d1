"""The "orders" pipeline soak: ``firesteel run-local`` SIGKILLed and restarted, many times.

Usage::

    python -m firesteel.testing.pipelines.soak {orders,orders-kafka} [--cycles N]
        [--workdir DIR] [--seed S] [--example DIR]

runs the shipped orders example (``examples/pipelines/orders``: a JSON ingress, a
validation with two outlets, a keyed-state aggregate, two Parquet egresses) with
``firesteel run-local`` in its default mode (every streamlet a set of queries of one
Spark application), over local topics (``orders``) or over Kafka topics on a broker of
its own (``orders-kafka``, :func:`~firesteel.testing.kafka.kafka_cluster`).

Every cycle writes :data:`ORDERS_PER_CYCLE` more orders and starts the runner, as a
process of its own, with another trigger interval and Spark shuffle-partition count
than the start before (:data:`INTERVALS`, 1 to 4 partitions), armed with one kill:
half the time a point inside one query's driver-side commit (:data:`COMMIT_POINTS`, a
query drawn among the pipeline's, aimed by name: the pipeline's process is SIGKILLed
there, whereupon the soak SIGKILLs the runner's process group before it restarts
it), else the runner's process group SIGKILLed at a random moment of the
:data:`RANDOM_WINDOW_S` seconds after every streamlet started. The runner's reaper
takes its streamlets with it; the next cycle starts once none is left. After the last
cycle an unarmed runner works until the outputs hold every order, then stops (exit 2,
``"complete": false``, if it could not within :data:`FINAL_WAIT_S`: its ``lost`` then
counts what had not arrived yet).

The outputs are read by readers that are not firesteel's: the egresses' Parquet files
by pyarrow's dataset reader (each customer's latest total is its count and sum of valid
orders, no total and no rejected order twice, each rejection for its reason), the
Kafka topics by a plain ``read_committed`` consumer (every order, valid order and
rejected order once). The command prints one JSON line with the counts and exits 1 if
anything was lost or duplicated.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from firesteel.testing.faults import FAULT_ENV, MARKER_DIR_ENV, PGID_ENV, SESSION
from firesteel.testing.harness import at_point, fault_setting
from firesteel.testing.pipelines.orders import (
    expected_totals,
    final_totals,
    reason,
    repeated,
    rows,
    write_orders,
)

logger = logging.getLogger(__name__)

PATHS = ("orders", "orders-kafka")
KAFKA = "orders-kafka"
EXAMPLE = Path(__file__).resolve().parents[5] / "examples" / "pipelines" / "orders"
"""The shipped example in this checkout (``--example`` names another copy)."""
TOPICS = ("orders", "valid-orders", "rejected-orders", "customer-totals")
STREAMLETS = ("orders", "validate", "totals", "store-totals", "store-rejected")

ORDERS_PER_CYCLE = 40
INTERVALS = ("500ms", "1s", "2s", "3s")
RANDOM_WINDOW_S = 20.0
"""A random kill comes within this long after every streamlet of the start is running."""
WAIT_S = 600.0
"""How long a start may take to reach its kill."""
FINAL_WAIT_S = 1800.0
"""How long the last, unarmed run may take to count every order (a loaded machine restarts
streamlets whose Python workers missed Spark's 10 s to connect back)."""
POLL_S = 0.5
RUNNING = re.compile(rb"streamlet \S+ running \d+ queries")
"""The host's log line of a streamlet whose queries started."""

OUTLETS = (
    "orders.orders.out",
    "orders.validate.valid",
    "orders.validate.rejected",
    "orders.totals.out",
)
"""Queries writing an outlet (a file topic, or a Kafka topic in write-ahead mode)."""
EGRESSES = ("orders.store-totals.main", "orders.store-rejected.main")
"""Queries of the egresses, writing Parquet files through the file sink."""


def _pairs(points: tuple[str, ...], queries: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(point, query) for point in points for query in queries]


FILE_COMMIT = ("driver.mid_commit", "driver.after_commit")
COMMIT_POINTS = {
    "orders": _pairs(FILE_COMMIT, OUTLETS + EGRESSES),
    KAFKA: [
        *_pairs(("kafka.after_commit_transaction", "driver.after_commit"), OUTLETS),
        *_pairs(FILE_COMMIT, EGRESSES),
    ],
}
"""Points inside a batch's commit (between its first and last durable write), per path and
query: the file sink's manifest before its moves, a write-ahead segment's transaction before
the batch is recorded, the commit done before Spark's ``commits/N``."""


class Orders:
    """One soak run: its folders, its orders so far, how each start is configured."""

    def __init__(self, path: str, workdir: Path, example: Path, bootstrap: str | None) -> None:
        self.path = path
        self.workdir = workdir
        self.inputs = workdir / "in"
        self.totals = workdir / "totals"
        self.rejected = workdir / "rejected"
        self.work = workdir / "work"
        self.bootstrap = bootstrap
        self.suffix = f"soak-{int(time.time())}"
        self.blueprint = self._blueprint(example)
        self.orders: list[dict[str, object]] = []

    def _blueprint(self, example: Path) -> Path:
        """A copy of the example, its Kafka topics named for this run."""
        folder = self.workdir / "example"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "orders.py").write_text((example / "orders.py").read_text())
        text = (example / "blueprint.conf").read_text()
        if self.bootstrap is not None:
            text += "".join(
                f'blueprint.topics.{t}.topic.name = "{t}-{self.suffix}"\n' for t in TOPICS
            )
        (folder / "blueprint.conf").write_text(text)
        return folder / "blueprint.conf"

    def feed(self) -> None:
        self.orders += write_orders(self.inputs, len(self.orders), ORDERS_PER_CYCLE)

    def settings(self, interval: str, partitions: int) -> list[str]:
        """A start's settings, with its trigger interval and shuffle-partition count."""
        parameters = "firesteel.streamlets.{}.config-parameters"
        settings = [
            f"{parameters.format('orders')}.input-dir = {self.inputs}",
            f"{parameters.format('store-totals')}.output-dir = {self.totals}",
            f"{parameters.format('store-rejected')}.output-dir = {self.rejected}",
            f"{parameters.format('validate')}.max-amount = 500.0",
            f'{parameters.format("validate")}.currency = "EUR"',
            f"{parameters.format('validate')}.max-age = 1 day",
            f"firesteel.runtimes.spark.checkpointing.interval = {interval}",
            f'firesteel.runtimes.spark.config {{ "spark.sql.shuffle.partitions" = {partitions} }}',
        ]
        if self.bootstrap is not None:
            settings.append(f'firesteel.kafka.bootstrap.servers = "{self.bootstrap}"')
        return settings

    def start(self, settings: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
        """``firesteel run-local`` in a process group of its own."""
        command = [sys.executable, "-m", "firesteel.cli.main", "run-local", str(self.blueprint)]
        command += ["--work", str(self.work), *settings]
        with open(log, "ab") as out:
            return subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **env},
                start_new_session=True,
            )

    def done(self) -> bool:
        """Whether the egresses hold every order (as many rows, at least)."""
        rejections = sum(reason(r) is not None for r in self.orders)
        return (
            final_totals(rows(self.totals)) == expected_totals(self.orders)
            and len(rows(self.rejected)) >= rejections
        )

    def check(self) -> dict[str, Any]:
        """Lost and duplicated orders, read with pyarrow and a plain ``read_committed``
        consumer."""
        wanted, found = expected_totals(self.orders), final_totals(rows(self.totals))
        valid = sum(n for n, _ in wanted.values())
        lost = sum(max(0, n - found.get(c, (0, 0.0))[0]) for c, (n, _) in wanted.items())
        rejected = rows(self.rejected)
        should = Counter(r for r in map(reason, self.orders) if r is not None)
        got = Counter(str(r["reason"]) for r in {str(r["order_id"]): r for r in rejected}.values())
        report: dict[str, Any] = {
            "orders": len(self.orders),
            "valid": valid,
            "rejected": sum(should.values()),
            "lost": lost + sum((should - got).values()),
            "duplicated": len(repeated(rows(self.totals), rejected)),
            "wrong": int(any(found.get(c, (0, a))[1] != a for c, (_, a) in wanted.items())),
        }
        if self.bootstrap is not None:
            report["topics"] = self._topics(valid, sum(should.values()))
            report["lost"] += sum(t["lost"] for t in report["topics"].values())
            report["duplicated"] += sum(t["duplicated"] for t in report["topics"].values())
        return report

    def _topics(self, valid: int, rejected: int) -> dict[str, dict[str, int]]:
        """Each topic's orders read by a plain ``read_committed`` consumer, decoded with the
        json module or fastavro (the example's own schemas)."""
        from firesteel.testing.kafka import read_committed

        wanted = {"orders": len(self.orders), "valid-orders": valid, "rejected-orders": rejected}
        schemas = self._schemas()
        counts = {}
        for topic, n in wanted.items():
            records = read_committed(str(self.bootstrap), f"{topic}-{self.suffix}")
            ids = Counter(_order_id(record.value or b"", schemas.get(topic)) for record in records)
            counts[topic] = {
                "records": len(records),
                "lost": max(0, n - len(ids)),
                "duplicated": sum(k - 1 for k in ids.values()),
            }
        return counts

    def _schemas(self) -> dict[str, Any]:
        """The Avro schemas of the example's Avro topics, from its module."""
        import fastavro

        spec = importlib.util.spec_from_file_location(
            "orders_example", self.blueprint.parent / "orders.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return {
            "valid-orders": fastavro.parse_schema(module.VALID),
            "rejected-orders": fastavro.parse_schema(module.REJECTED),
        }


def _order_id(value: bytes, schema: Any) -> str:
    """The order id of a topic's record: JSON text, or Avro binary of ``schema``."""
    if schema is None:
        return str(json.loads(value)["order_id"])
    import fastavro

    record = fastavro.schemaless_reader(io.BytesIO(value), schema)
    return str(record["order_id"])  # type: ignore[call-overload,index]


def _pipeline_processes(work: Path) -> list[psutil.Process]:
    """The processes of a pipeline running on ``work`` (its host and streamlets)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if str(work) in cmdline and any(a.startswith("firesteel.pipelines.") for a in cmdline):
            found.append(process)
    return found


def _gone(runner: subprocess.Popen[bytes], work: Path) -> None:
    """SIGKILL the runner's process group; wait until its streamlets are gone too."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(runner.pid, signal.SIGKILL)
    runner.wait()
    deadline = time.monotonic() + 60
    while _pipeline_processes(work):
        if time.monotonic() > deadline:
            for process in _pipeline_processes(work):
                with contextlib.suppress(psutil.NoSuchProcess):
                    os.killpg(process.pid, signal.SIGKILL)
        time.sleep(POLL_S)


def _running_all(log: Path, since: int, streamlets: int) -> bool:
    """Whether the pipeline's log, past byte ``since``, says every streamlet is running."""
    if not log.exists():
        return False
    with open(log, "rb") as text:
        text.seek(since)
        return len(RUNNING.findall(text.read())) >= streamlets


def cycle(run: Orders, rng: random.Random, index: int) -> dict[str, Any]:
    """One start of the runner, fed and armed; what killed it."""
    run.feed()
    # Each start changes what users change: the trigger interval, the shuffle partitions.
    interval, partitions = rng.choice(INTERVALS), rng.randint(1, 4)
    settings = run.settings(interval, partitions)
    markers = run.workdir / "faults" / str(index)
    env: dict[str, str] = {}
    kill: dict[str, Any]
    if rng.random() < 0.5:
        point, query = rng.choice(COMMIT_POINTS[run.path])
        env = {
            FAULT_ENV: fault_setting(at_point(point, query=query)),
            MARKER_DIR_ENV: str(markers),
            PGID_ENV: SESSION,
        }
        kill = {"point": point, "query": query}
    else:
        kill = {"random": round(rng.uniform(0, RANDOM_WINDOW_S), 1)}
    log = run.work / "logs" / "pipeline.log"
    since = log.stat().st_size if log.exists() else 0
    runner = run.start(settings, env, run.workdir / "runner.log")
    started = time.monotonic()
    try:
        while time.monotonic() - started < WAIT_S and runner.poll() is None:
            if "point" in kill:
                fired = markers.is_dir() and any(
                    not p.name.startswith(".") for p in markers.iterdir()
                )
                if fired:
                    kill["fired"] = True
                    break
            elif _running_all(log, since, len(STREAMLETS)):
                time.sleep(kill["random"])
                break
            time.sleep(POLL_S)
        kill["runner_exit"] = runner.poll()
    finally:
        _gone(runner, run.work)
    return {**kill, "interval": interval, "shuffle_partitions": partitions}


@contextlib.contextmanager
def _broker(path: str, workdir: Path) -> Iterator[str | None]:
    if path != KAFKA:
        yield None
        return
    from firesteel.testing.kafka import kafka_cluster

    with kafka_cluster(workdir / "broker") as bootstrap:
        yield bootstrap


def soak(
    path: str, workdir: Path, cycles: int, rng: random.Random, example: Path
) -> dict[str, Any]:
    """``cycles`` armed starts of the runner, then an unarmed one until every order is
    counted; the report (module docs)."""
    began = time.monotonic()
    with _broker(path, workdir) as bootstrap:
        run = Orders(path, workdir, example, bootstrap)
        kills = []
        for index in range(cycles):
            kill = cycle(run, rng, index)
            logger.info("soak %s: cycle %d/%d: %s", path, index + 1, cycles, kill)
            kills.append(kill)
        last = run.settings(rng.choice(INTERVALS), rng.randint(1, 4))
        runner = run.start(last, {}, workdir / "runner.log")
        try:
            deadline = time.monotonic() + FINAL_WAIT_S
            while not run.done() and runner.poll() is None and time.monotonic() < deadline:
                time.sleep(POLL_S)
            complete = run.done()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(runner.pid, signal.SIGTERM)
            runner.wait()
        report = run.check()
    fired = sum(bool(k.get("fired")) for k in kills)
    return {
        "path": path,
        "cycles": cycles,
        "kills": fired + sum("random" in k for k in kills),
        "at_commit_points": fired,
        "points_not_reached": sum("point" in k and not k.get("fired") for k in kills),
        "complete": complete,
        **report,
        "seconds": round(time.monotonic() - began, 1),
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m firesteel.testing.pipelines.soak`` (module docs)."""
    parser = argparse.ArgumentParser(prog="python -m firesteel.testing.pipelines.soak")
    parser.add_argument("path", choices=PATHS)
    parser.add_argument("--cycles", type=int, default=6)
    parser.add_argument("--workdir", type=Path, help="kept afterwards (default: a temp folder)")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--example", type=Path, default=EXAMPLE, help="the orders example folder")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    rng = random.Random(options.seed)
    with tempfile.TemporaryDirectory(prefix="firesteel-soak-") as scratch:
        workdir = (options.workdir or Path(scratch)).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        report = soak(options.path, workdir, options.cycles, rng, options.example)
    sys.stdout.write(json.dumps(report) + "\n")
    if not report["complete"]:
        logger.error("the last run did not count every order within %g s", FINAL_WAIT_S)
        return 2
    return 1 if report["lost"] or report["duplicated"] or report["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
