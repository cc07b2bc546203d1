"""One streamlet's process (its Spark driver): ``python -m firesteel.pipelines.process``.

Started by :class:`firesteel.pipelines.runner.LocalRunner`; builds the
streamlet's SparkSession (its Spark configuration applied), runs its logic on
local topics, or on Kafka topics when the configuration names a cluster, and
stops its queries on SIGTERM. Exits 1 naming the failure if a query fails.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from firesteel.core.faults import name_query
from firesteel.pipelines.config import PipelineConfig
from firesteel.pipelines.kafka import KafkaContext
from firesteel.pipelines.local import LocalContext
from firesteel.pipelines.runner import load
from firesteel.pipelines.verify import VerifiedBlueprint

logger = logging.getLogger("firesteel.pipelines.process")

POLL_S = 1.0


def main(argv: list[str] | None = None) -> int:
    """Run one streamlet until SIGTERM or a failure."""
    parser = argparse.ArgumentParser(prog="python -m firesteel.pipelines.process")
    parser.add_argument("blueprint")
    parser.add_argument("streamlet")
    parser.add_argument("--work", required=True)
    parser.add_argument("--master", help="a Spark master URL (default: local[2])")
    parser.add_argument("--conf", action="append", default=[])
    parser.add_argument("settings", nargs="*")
    args = parser.parse_intermixed_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    verified, config = load(Path(args.blueprint), args.conf, args.settings)
    resolved = config.streamlet(args.streamlet)
    from firesteel.core import local_session

    conf = {"spark.ui.showConsoleProgress": "false"}
    if args.master:
        # Executors unpickle the streamlet's functions by module name: they import the
        # blueprint's modules from its folder, as this process does.
        folder = str(Path(args.blueprint).resolve().parent)
        paths = [folder, *filter(None, [os.environ.get("PYTHONPATH")])]
        conf["spark.executorEnv.PYTHONPATH"] = os.pathsep.join(paths)
    spark = local_session(
        f"{verified.blueprint.name}.{args.streamlet}",
        master=args.master or "local[2]",
        config={**conf, **resolved.spark_conf},
        log_level="WARN",
    )
    stopping = threading.Event()
    # Only a flag here: a Py4J call from a signal handler would interrupt the main
    # thread's own call on the same connection.
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    queries = start_streamlet(spark, verified, config, args.streamlet, Path(args.work))
    logger.info("streamlet %s running %d queries", args.streamlet, len(queries))
    return _watch(args.streamlet, queries, stopping)


def start_streamlet(
    spark: Any, verified: VerifiedBlueprint, config: PipelineConfig, streamlet: str, work: Path
) -> Sequence[Any]:
    """Start streamlet ``streamlet``'s queries in ``spark``, on Kafka topics when the
    configuration names a cluster, else on the local topics under ``work``.

    Each query it started is reported by id and name (:func:`firesteel.core.faults.name_query`),
    so a crash test can aim a point of the query's driver-side commit at it by name.
    """
    runtime = KafkaContext if config.kafka_properties() else LocalContext
    context = runtime(spark, verified, config, streamlet, work)
    queries = verified.streamlets[streamlet]().create_logic(context).run()
    for query in spark.streams.active:
        if query.name:
            name_query(str(query.id), query.name)
    return queries


def _watch(streamlet: str, queries: Sequence[Any], stopping: threading.Event) -> int:
    """Wait for SIGTERM (stop every query: 0), a failed query (1) or all finished (0)."""
    while not stopping.wait(POLL_S):
        failed = [q for q in queries if not q.isActive and q.exception() is not None]
        if failed:
            logger.error(
                "streamlet %s: query %s failed: %s",
                streamlet,
                failed[0].name,
                failed[0].exception(),
            )
            for query in queries:
                query.stop()
            return 1
        if not any(q.isActive for q in queries):
            return 0
    logger.info("stopping streamlet %s", streamlet)
    for query in queries:
        query.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
