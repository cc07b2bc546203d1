"""Pipelines (issue 33): a two-streamlet pipeline over Kafka beside one query doing the same work.

- the pipeline: topic ``in`` -> streamlet ``first`` (identity map) -> topic
  ``mid`` -> streamlet ``second`` (identity map) -> topic ``out``: each outlet
  writes through firesteel's exactly-once Kafka sink, each inlet reads
  committed records through its resettable source, Avro values of one schema
  keyed by ``id``. Both streamlets start through the pipeline layer itself
  (blueprint verified, configuration model, checkpoints under a work folder,
  :func:`firesteel.pipelines.process.start_streamlet`), in the benchmark's one
  Spark session: the figures compare queries, not process start-ups
  (``firesteel run-local`` gives each streamlet a process and session of its
  own, which costs 10-20 s once per run here);
- the baseline: one query, ``in`` -> identity map -> ``out``, the
  ``firesteel.kafka`` source and exactly-once sink with the options the
  pipeline's ports give them (Avro values, the key column, the transaction
  timeout, the same processing-time trigger).

The ``run-local`` workloads (full run only, issue 50) start ``firesteel run-local`` as a
user does, on local topics, for the shipped example (three streamlets) and the
five-streamlet "orders" example, each once with every streamlet in one Spark
application (``firesteel.runner.jvm = shared``, the default) and once with one
JVM per streamlet (``per-streamlet``, the former way): the peak PSS of the
runner's whole process tree (runner, reaper, drivers, JVMs, Spark's Python
workers), sampled every half second from the launch until
:data:`SETTLE_S` after the first output file, and the seconds from the launch
to that first output file (an extra figure), beside the issue's goals
(1.5 GB for five streamlets, read as 1.5 GiB = 1,536 MiB: every PSS here is in
MiB, as Linux's tools count it; 60 s on a quiet machine). Then each mode runs
the orders example for :data:`RESTARTS_S` with a new input file every
:data:`DROP_S`, supervision allowing any number of restarts: the restarts it
took (the runner's and, in one application, the streamlets' own, counted in
the logs) are the figure that sets ``firesteel.supervision.restarts``'s
default (issue 50's item 5).

Both sides are timed from their start until the last query has committed every
record (its progress reports count them), so the ratio pipeline / one query is
the cost of the Kafka hop: a second exactly-once write and read, and the second
streamlet's wait for its next trigger. Every run's output topic is counted
afterwards from the raw log (outside the timing): a run that lost records
fails the benchmark.

The full run also measures the same two stages in Quix Streams (issue 33's
"beside Quix Streams doing the same pipeline"): two exactly-once applications
(``in`` -> ``mid``, ``mid`` -> ``out``, identity), each its own process in the
``peers`` group's Quix Streams environment (:data:`benchmarks.peers.venv.QUIX`,
created from PyPI on first use), timed from their launch to the last output
record committed (a plain ``read_committed`` consumer,
:class:`benchmarks.peers.watch.Watcher`). Quix copies the bytes without
decoding them where firesteel's ports decode and encode Avro, and its start-up
(two Python processes) is inside its time where the streamlets' queries start
in a warm session: both favour Quix. ``--quick`` leaves it out, as the quick
benchmark run leaves the ``peers`` group out: creating the environment takes
minutes.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import spark
from benchmarks.broker import kafka_broker
from benchmarks.framework import Figure, Measure, Workload
from firesteel.pipelines import (
    AvroCodec,
    Inlet,
    Outlet,
    PipelineConfig,
    Streamlet,
    StreamletContext,
    StreamletLogic,
    StreamletShape,
    parse_blueprint,
    verify,
)
from firesteel.pipelines.process import start_streamlet

PARTITIONS = 4
QUICK_PARTITIONS = 1
"""The quick run's: one task, one write-ahead segment, so the second streamlet reads the
first's output in one batch (a test of the code paths, not a measurement)."""
RECORD = {
    "type": "record",
    "name": "Record",
    "fields": [{"name": "id", "type": "long"}, {"name": "payload", "type": "string"}],
}
PAYLOAD = "x" * 90
"""With the id, about 100 bytes of Avro per record."""
FULL_RECORDS = 200_000
QUICK_RECORDS = 500
TRIGGER_S, QUICK_TRIGGER_S = 1.0, 0.2
TIMEOUT_S = 600.0
TRANSACTION_TIMEOUT_MS = 60_000
"""The pipeline's default checkpointing timeout, which its Kafka outlets take."""
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "pipelines"
SETTLE_S = 30.0
"""How long memory is still sampled after the first output: every streamlet running."""
OUTPUT_WINDOW_S = 300.0
"""A run with no output by then reports its peak PSS so far, saying so (a machine whose
load keeps Spark's Python workers from connecting back within its fixed 10 s)."""
PSS_GOAL_MIB = 1536.0
MIB = 2**20
FIRST_OUTPUT_GOAL_S = 60.0
FIRST_OUTPUT = "s to first output"
RESTARTS = "restarts"
_RECORDED: dict[str, list[float]] = {}
RESTARTS_S = 600.0
DROP_S = 10.0


class Copy(Streamlet):
    """The identity map: every record of ``in`` to ``out``, keyed by ``id``."""

    shape = StreamletShape(
        inlets=[Inlet("in", AvroCodec(RECORD))],
        outlets=[Outlet("out", AvroCodec(RECORD), key="id")],
    )

    def create_logic(self, context: StreamletContext) -> StreamletLogic:
        return CopyLogic(context)


class CopyLogic(StreamletLogic):
    def run(self) -> Sequence[Any]:
        return [self.context.write_stream(self.context.read_stream("in"), "out")]


@dataclass
class _Input:
    bootstrap: str = ""
    topic: str = ""
    records: int = 0
    partitions: int = PARTITIONS
    scratch: Path | None = None


_STATE = _Input()


def _values(records: int) -> list[bytes]:
    """``records`` Avro values of :data:`RECORD`, ids 0 to ``records - 1``."""
    import fastavro

    schema = fastavro.parse_schema(RECORD)
    values = []
    for index in range(records):
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, schema, {"id": index, "payload": PAYLOAD})
        values.append(buffer.getvalue())
    return values


@contextmanager
def setup(quick: bool) -> Iterator[None]:
    """Start the broker and the Spark session; fill the input topic."""
    from firesteel.testing.kafka import create_topic, produce

    spark.session()
    with (
        kafka_broker() as bootstrap,
        tempfile.TemporaryDirectory(prefix="firesteel-bench-pipelines-") as scratch,
    ):
        records = QUICK_RECORDS if quick else FULL_RECORDS
        _STATE.partitions = QUICK_PARTITIONS if quick else PARTITIONS
        topic = create_topic(bootstrap, _STATE.partitions)
        produce(bootstrap, topic, _values(records))
        _STATE.bootstrap, _STATE.topic, _STATE.records = bootstrap, topic, records
        _STATE.scratch = Path(scratch)
        try:
            yield
        finally:
            _STATE.scratch = None


def _committed(queries: Sequence[Any]) -> int:
    """Records the last of ``queries`` committed, by its progress reports."""
    return sum(p["numInputRows"] for p in queries[-1].recentProgress)


def _run(queries: Sequence[Any], started: float, output: str, side: str) -> float:
    """Wait until the last query committed every record, stop all; rows per second."""
    from firesteel.testing.kafka import read_log

    try:
        while _committed(queries) < _STATE.records:
            for query in queries:
                if not query.isActive:
                    msg = (
                        f"bench_pipelines: {side}: query {query.name} stopped: {query.exception()}"
                    )
                    raise RuntimeError(msg)
            if time.perf_counter() - started > TIMEOUT_S:
                msg = f"bench_pipelines: {side} committed {_committed(queries)} records in time"
                raise RuntimeError(msg)
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
    finally:
        for query in queries:
            query.stop()
    got = len(read_log(_STATE.bootstrap, output).committed)
    if got != _STATE.records:
        msg = f"bench_pipelines: {side} wrote {got} of {_STATE.records} records to {output}"
        raise RuntimeError(msg)
    return _STATE.records / elapsed


def _blueprint(mid: str, output: str) -> str:
    return f"""
blueprint {{
  streamlets {{ first = benchmarks.bench_pipelines.Copy, second = benchmarks.bench_pipelines.Copy }}
  topics {{
    in {{ topic.name = "{_STATE.topic}", consumers = [first.in] }}
    mid {{ topic.name = "{mid}", partitions = {_STATE.partitions}, producers = [first.out],
          consumers = [second.in] }}
    out {{ topic.name = "{output}", partitions = {_STATE.partitions}, producers = [second.out] }}
  }}
}}
"""


def pipeline(trigger_s: float) -> Callable[[], float]:
    """The two-streamlet pipeline, started through the pipeline layer (module docs)."""

    def run() -> float:
        from firesteel.pipelines.kafka import create_topics

        run_id = uuid.uuid4().hex[:12]
        mid, output = f"bench-mid-{run_id}", f"bench-out-{run_id}"
        # A blueprint name of its own per run: the outlets' sink ids follow it.
        blueprint = parse_blueprint(_blueprint(mid, output), "bench.conf", f"bench-{run_id}")
        verified = verify(blueprint)
        config = PipelineConfig.load(
            verified,
            arguments=[
                f'firesteel.kafka.bootstrap.servers = "{_STATE.bootstrap}"',
                f"firesteel.runtimes.spark.checkpointing.interval = {int(trigger_s * 1000)}ms",
            ],
        )
        create_topics(verified, config)
        work = Path(tempfile.mkdtemp(prefix="pipeline-", dir=_STATE.scratch))
        session = spark.session()
        started = time.perf_counter()
        queries = [
            *start_streamlet(session, verified, config, "first", work),
            *start_streamlet(session, verified, config, "second", work),
        ]
        return _run(queries, started, output, "the pipeline")

    return run


def one_query(trigger_s: float) -> Callable[[], float]:
    """One query doing the pipeline's work: ``in`` -> identity map -> ``out``, exactly-once."""

    def run() -> float:
        from firesteel.testing.kafka import create_topic

        output = create_topic(_STATE.bootstrap, _STATE.partitions)
        checkpoint = tempfile.mkdtemp(prefix="query-", dir=_STATE.scratch)
        avro = json.dumps(RECORD)
        started = time.perf_counter()
        records = (
            spark.session()
            .readStream.format("firesteel.kafka")
            .option("kafka.bootstrap.servers", _STATE.bootstrap)
            .option("subscribe", _STATE.topic)
            .option("startingOffsets", "earliest")
            .option("checkpointLocation", checkpoint)
            .option("value.format", "avro")
            .option("value.schema", avro)
            .load()
        )
        query = (
            records.selectExpr("id", "payload", "CAST(id AS STRING) AS key")
            .writeStream.format("firesteel.kafka")
            .option("kafka.bootstrap.servers", _STATE.bootstrap)
            .option("topic", output)
            .option("value.format", "avro")
            .option("value.schema", avro)
            .option("guarantee", "exactly-once")
            .option("kafka.transaction.timeout.ms", str(TRANSACTION_TIMEOUT_MS))
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=f"{int(trigger_s * 1000)} milliseconds")
            .start()
        )
        return _run([query], started, output, "one query")

    return run


def quix_pipeline(commit_s: float) -> Callable[[], float]:
    """The same two stages in Quix Streams (module docs), each committing its transaction
    every ``commit_s`` (the streamlets' trigger interval); rows per second from launch."""

    def run() -> float:
        from benchmarks.peers.job import Job
        from benchmarks.peers.venv import QUIX, quix_command
        from benchmarks.peers.watch import Watcher
        from firesteel.testing.kafka import create_topic

        QUIX.ensure()
        mid = create_topic(_STATE.bootstrap, _STATE.partitions)
        output = create_topic(_STATE.bootstrap, _STATE.partitions)
        work = Path(tempfile.mkdtemp(prefix="quix-", dir=_STATE.scratch))

        def stage(source: str, target: str, name: str) -> Job:
            interval = ["--commit-interval", f"{commit_s:g}"]
            command = quix_command("identity", _STATE.bootstrap, source, target, work / name)
            return Job([*command, *interval], cwd=work)

        watcher = Watcher(_STATE.bootstrap, output, _STATE.partitions, counts=False, stamps=False)
        try:
            with (
                stage(_STATE.topic, mid, "first") as first,
                stage(mid, output, "second") as second,
            ):

                def alive() -> None:
                    first.check()
                    second.check()

                done = watcher.wait_records(_STATE.records, TIMEOUT_S, alive)
            seen = watcher.output.records
        finally:
            watcher.close()
        if seen != _STATE.records:
            msg = f"bench_pipelines: Quix Streams wrote {seen} of {_STATE.records} to {output}"
            raise RuntimeError(msg)
        return _STATE.records / (done - first.launched)

    return run


def _orders_input(folder: Path, name: str = "orders.json") -> None:
    """Sixty orders as one JSON-lines file, a tenth of them in dollars (rejected)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    lines = [
        json.dumps(
            {
                "order_id": f"o-{i}",
                "customer": f"c{i % 3}",
                "amount": 10.0 + i,
                "currency": "USD" if i % 10 == 3 else "EUR",
                "placed_at": now,
            }
        )
        for i in range(60)
    ]
    hidden = folder / f".{name}"
    hidden.write_text("\n".join(lines) + "\n")
    hidden.rename(folder / name)


def _tree_pss(root: Any) -> int:
    """PSS bytes of ``root`` and every descendant alive now."""
    import psutil

    try:
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for process in processes:
        try:
            total += process.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def run_local(example: str, jvm: str) -> Measure:
    """``firesteel run-local`` of example ``example`` with ``firesteel.runner.jvm = jvm``:
    peak PSS (MiB) of its process tree, and seconds from the launch to its first output."""

    def run() -> Figure:
        import psutil

        scratch = Path(tempfile.mkdtemp(prefix=f"firesteel-bench-run-local-{example}-"))
        command, output = _command(example, scratch, jvm)
        started = time.perf_counter()
        with open(scratch / "runner.log", "wb") as log:
            runner = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        root = psutil.Process(runner.pid)
        peak = 0

        def sample(until: Any, limit: float) -> float | None:
            """Sample the peak PSS until ``until()`` (the seconds since the launch then) or
            ``limit`` seconds after the launch (None)."""
            nonlocal peak
            while not until():
                if runner.poll() is not None:
                    msg = f"bench_pipelines: run-local of {example} exited: {scratch}/runner.log"
                    raise RuntimeError(msg)
                if time.perf_counter() - started > limit:
                    return None
                peak = max(peak, _tree_pss(root))
                time.sleep(0.5)
            return time.perf_counter() - started

        try:
            first = sample(lambda: any(output.glob("*.parquet")), OUTPUT_WINDOW_S)
            if first is not None:
                sample(lambda: time.perf_counter() - started > first + SETTLE_S, float("inf"))
        finally:
            runner.send_signal(signal.SIGTERM)
            try:
                runner.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(runner.pid, signal.SIGKILL)
                runner.wait()
        restarted = _restarts_logged(scratch)
        shutil.rmtree(scratch, ignore_errors=True)
        _RECORDED.setdefault(f"{example} {jvm} pss", []).append(peak / MIB)
        if first is None:
            _RECORDED.setdefault(f"{example} {jvm} first", []).append(float("nan"))
            note = f"no output within {OUTPUT_WINDOW_S:g} s: peak PSS over that window"
            return Figure(peak / MIB, {RESTARTS: restarted}, note)
        _RECORDED.setdefault(f"{example} {jvm} first", []).append(first)
        return Figure(peak / MIB, {FIRST_OUTPUT: first, RESTARTS: restarted})

    return run


def _command(example: str, scratch: Path, jvm: str) -> tuple[list[str], Path]:
    """``firesteel run-local`` of ``example`` with its folders under ``scratch``; the
    folder its first output lands in."""
    inputs, output = scratch / "input", scratch / "output"
    inputs.mkdir(parents=True, exist_ok=True)
    if example == "sensors":
        shutil.copy(EXAMPLES / "sensors" / "sample-readings.json", inputs)
        settings = [
            f"firesteel.streamlets.readings.config-parameters.input-dir = {inputs}",
            f"firesteel.streamlets.store.config-parameters.output-dir = {output}",
        ]
    else:
        _orders_input(inputs)
        settings = [
            f"firesteel.streamlets.orders.config-parameters.input-dir = {inputs}",
            f"firesteel.streamlets.store-totals.config-parameters.output-dir = {output}",
            "firesteel.streamlets.store-rejected.config-parameters.output-dir = "
            f"{scratch / 'rejected'}",
        ]
    folder = EXAMPLES / example
    command = [sys.executable, "-m", "firesteel.cli.main", "run-local"]
    command += [str(folder / "blueprint.conf"), "--conf", str(folder / "local.conf")]
    command += ["--work", str(scratch / "work"), *settings, f"firesteel.runner.jvm = {jvm}"]
    # Restarts are counted, not limited: a run stopped by its restart budget measures nothing.
    command.append("firesteel.supervision.restarts = 1000")
    return command, output


def _restarts_logged(scratch: Path) -> int:
    """The restarts the runner's and the pipeline's logs under ``scratch`` record."""
    logs = [scratch / "runner.log", *(scratch / "work" / "logs").glob("*.log")]
    return sum(log.read_text(errors="replace").count(": restart ") for log in logs)


def restarts(jvm: str) -> Measure:
    """Restarts of the orders example in :data:`RESTARTS_S` of ``run-local`` (module docs)."""

    def run() -> float:
        scratch = Path(tempfile.mkdtemp(prefix="firesteel-bench-restarts-"))
        command, _ = _command("orders", scratch, jvm)
        with open(scratch / "runner.log", "wb") as log:
            runner = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        started = time.perf_counter()
        try:
            while time.perf_counter() - started < RESTARTS_S:
                if runner.poll() is not None:
                    msg = f"bench_pipelines: run-local exited: {scratch}/runner.log"
                    raise RuntimeError(msg)
                _orders_input(scratch / "input", f"orders-{time.monotonic_ns()}.json")
                time.sleep(DROP_S)
        finally:
            runner.send_signal(signal.SIGTERM)
            try:
                runner.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(runner.pid, signal.SIGKILL)
                runner.wait()
        count = _restarts_logged(scratch)
        shutil.rmtree(scratch, ignore_errors=True)
        return float(count)

    return run


def _recorded(key: str) -> Measure:
    """The figures an earlier workload's runs recorded under ``key``, in order."""
    taken = iter(range(1_000_000))

    def take() -> float:
        return _RECORDED[key][next(taken)]

    return take


def run_local_workloads() -> list[Workload]:
    """Each example run by ``run-local`` in one application beside one JVM per streamlet;
    the five-streamlet figures beside the issue's goals."""
    common: dict[str, Any] = {
        "group": "pipelines",
        "issue": "issue 50",
        "repetitions": 1,
        "warmup": 0,
        "lower_is_better": True,
    }
    out = [
        Workload(
            name=(
                f"run-local, {what}, local topics: peak PSS of its processes "
                f"(extra: {FIRST_OUTPUT}, {RESTARTS}), one Spark application"
            ),
            unit="MiB",
            baseline_name="one JVM per streamlet (firesteel.runner.jvm = per-streamlet)",
            goal=None,
            firesteel=run_local(example, "shared"),
            baseline=run_local(example, "per-streamlet"),
            **common,
        )
        for example, what in (
            ("sensors", "the sensors example (3 streamlets)"),
            ("orders", "the orders example (5 streamlets)"),
        )
    ]
    out += [
        Workload(
            name=(
                f"run-local, the orders example, {RESTARTS_S / 60:g} minutes, an input file "
                f"every {DROP_S:g} s: restarts, one Spark application"
            ),
            unit="restarts",
            baseline_name="one JVM per streamlet",
            goal=None,
            firesteel=restarts("shared"),
            baseline=restarts("per-streamlet"),
            **common,
        )
    ]
    for what, unit, goal, key in (
        ("peak PSS", "MiB", PSS_GOAL_MIB, "orders shared pss"),
        (FIRST_OUTPUT, "s", FIRST_OUTPUT_GOAL_S, "orders shared first"),
    ):
        out.append(
            Workload(
                name=f"run-local, the orders example (5 streamlets), one application: {what}",
                unit=unit,
                baseline_name=f"the issue's goal, {goal:g} {unit}",
                goal=1.0,
                firesteel=_recorded(key),
                baseline=lambda goal=goal: goal,
                **common,
            )
        )
    return out


def workloads(quick: bool) -> list[Workload]:
    """The pipeline beside one query, 100 B records, exactly-once."""
    repetitions, warmup = (1, 0) if quick else (3, 1)
    records = QUICK_RECORDS if quick else FULL_RECORDS
    trigger_s = QUICK_TRIGGER_S if quick else TRIGGER_S
    n = f"{records // 1000}k" if records >= 1000 else str(records)
    partitions = QUICK_PARTITIONS if quick else PARTITIONS
    spread = f"{partitions} partition{'s' if partitions > 1 else ''}"

    def beside(what: str, baseline_name: str, baseline: Callable[[], float]) -> Workload:
        return Workload(
            group="pipelines",
            name=(
                f"two-streamlet pipeline over Kafka {what}, "
                f"exactly-once, {trigger_s:g} s triggers, {n} x 100 B, {spread}"
            ),
            unit="rows/s",
            baseline_name=baseline_name,
            goal=None,
            issue="issue 33",
            firesteel=pipeline(trigger_s),
            baseline=baseline,
            repetitions=repetitions,
            warmup=warmup,
        )

    against_one_query = beside(
        "(identity maps, one Kafka hop) vs one query",
        "one query kafka -> identity map -> kafka, exactly-once",
        one_query(trigger_s),
    )
    if quick:
        return [against_one_query]
    against_quix = beside(
        "vs the same two stages in Quix Streams",
        "Quix Streams, two exactly-once applications (in -> mid -> out)",
        quix_pipeline(trigger_s),
    )
    return [against_one_query, against_quix, *run_local_workloads()]
