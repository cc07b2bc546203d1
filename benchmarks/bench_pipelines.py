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
from benchmarks.framework import Workload
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
    return [against_one_query, against_quix]
