"""The main example job: per-sensor running statistics, exactly-once, with keyed state.

Run it with ``firesteel demo`` (or ``python -m firesteel.examples.demo``)::

    <dir>/input/        sensor readings, JSON lines (generated when empty)
    <dir>/output/       the results, Parquet, written by the transactional file sink
    <dir>/checkpoint/   Spark's checkpoint (offsets, commits) and firesteel's records
    <dir>/state/        the keyed state snapshots (filesystem backend, or --backend)

The query::

    readStream.format("firesteel.files")  (JSON, 4 files per micro-batch)
      -> stateful(key="sensor", SensorStatistics, FilesystemBackend(<dir>/state))
      -> writeStream.format("firesteel.files").option("guarantee", "exactly-once")

``--backend rocksdb`` keeps the state in local RocksDB instances instead, with
incremental checkpoints in ``<dir>/state`` (``pip install firesteel-rocksdb``);
``--backend heap`` keeps it in memory with snapshots on local disk. Keep one
backend per ``<dir>``: a checkpoint is read by the backend that wrote it.

Output semantics: every micro-batch appends one row per sensor it touched,
with the sensor's statistics after that batch and the batch id; the newest
row per sensor (highest batch) is the sensor's current state, and that is
what the demo prints at the end. Run it again after adding files to
``<dir>/input`` and the statistics continue from the saved state; kill it
(Ctrl-C, kill -9) at any point and run it again: nothing is lost or counted twice.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import random
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from firesteel.state.descriptors import ValueStateDescriptor
from firesteel.state.processor import KeyedProcessor, KeyState

INPUT_SCHEMA = "sensor string, time timestamp, temperature double"
OUTPUT_SCHEMA = (
    "sensor string, count long, mean double, min double, max double, "
    "last_seen timestamp, batch_id long"
)


@dataclass
class SensorStats:
    """The state kept per sensor."""

    count: int
    mean: float
    min: float
    max: float
    last_seen: dt.datetime


class SensorStatistics(KeyedProcessor):
    """Keeps count, mean, min, max and last-seen time per sensor; emits them per batch."""

    stats = ValueStateDescriptor("stats", SensorStats)

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        current = state.value(self.stats)
        stats = current.value()
        temperatures = rows.column("temperature").to_pylist()
        times = rows.column("time").to_pylist()
        for temperature, seen in zip(temperatures, times, strict=True):
            if temperature is None:
                continue
            if stats is None:
                stats = SensorStats(1, temperature, temperature, temperature, seen)
                continue
            stats.count += 1
            stats.mean += (temperature - stats.mean) / stats.count
            stats.min = min(stats.min, temperature)
            stats.max = max(stats.max, temperature)
            stats.last_seen = max(stats.last_seen, seen)
        if stats is None:
            return None
        current.update(stats)
        return [
            {
                "sensor": key[0],
                "count": stats.count,
                "mean": stats.mean,
                "min": stats.min,
                "max": stats.max,
                "last_seen": stats.last_seen,
                "batch_id": state.batch_id,
            }
        ]


def generate_readings(folder: Path, files: int, per_file: int, sensors: int, seed: int = 42) -> int:
    """Write ``files`` JSON-lines files of sensor readings; returns the number of readings."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    start = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    baselines = {f"sensor-{i:03d}": rng.uniform(15.0, 25.0) for i in range(sensors)}
    names = sorted(baselines)
    written = 0
    for index in range(files):
        lines = []
        for offset in range(per_file):
            sensor = rng.choice(names)
            moment = start + dt.timedelta(seconds=index * per_file + offset)
            temperature = round(baselines[sensor] + rng.gauss(0.0, 2.0), 2)
            lines.append(
                json.dumps(
                    {"sensor": sensor, "time": moment.isoformat(), "temperature": temperature}
                )
            )
        path = folder / f"readings-{index:05d}.json"
        path.write_text("\n".join(lines) + "\n")
        # The file source orders by modification time: keep the files in name order.
        stamp = time.time() - files + index
        os.utime(path, (stamp, stamp))
        written += per_file
    return written


def _session() -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from firesteel.core.spark.session import LOCAL_PROFILE, LOOPBACK, local_session

    return local_session(
        "firesteel-demo",
        config={
            **LOCAL_PROFILE,
            "spark.ui.showConsoleProgress": "false",
            **LOOPBACK,
            "spark.sql.session.timeZone": "UTC",
        },
    )


def _watch(query: Any, started: float, say: Any) -> None:
    """Print one line per finished micro-batch, and a heartbeat while one runs, until the end."""
    shown = -1
    last_line = time.monotonic()
    while True:
        active = query.isActive
        for progress in query.recentProgress:
            batch = progress["batchId"]
            if batch > shown:
                shown = batch
                last_line = time.monotonic()
                say(
                    f"  batch {batch}: {progress['numInputRows']} readings "
                    f"({last_line - started:.1f}s)"
                )
        if not active:
            return
        if time.monotonic() - last_line >= 10:
            last_line = time.monotonic()
            note = " (the first one also starts Spark's Python workers)" if shown < 0 else ""
            say(f"  batch {shown + 1} running{note} ({last_line - started:.1f}s)")
        time.sleep(0.5)


def latest_per_sensor(output: str) -> list[dict[str, Any]]:
    """The newest row per sensor (highest batch id) among the committed output."""
    from firesteel.files import read_committed

    table = read_committed(output)
    if table.num_rows == 0:
        return []
    newest: dict[str, dict[str, Any]] = {}
    for row in table.to_pylist():
        known = newest.get(row["sensor"])
        if known is None or row["batch_id"] > known["batch_id"]:
            newest[row["sensor"]] = row
    return [newest[sensor] for sensor in sorted(newest)]


def run(
    root: Path,
    *,
    files: int = 20,
    per_file: int = 500,
    sensors: int = 25,
    files_per_batch: int = 4,
    backend: str = "filesystem",
    say: Any = print,
) -> list[dict[str, Any]]:
    """Run the demo job under ``root`` with the state backend named ``backend``; returns the
    latest statistics per sensor."""
    from firesteel.backends.inspect import backend_class
    from firesteel.core.checkpoint import read_guarantee
    from firesteel.state import stateful

    started = time.monotonic()
    inputs, output = root / "input", root / "output"
    checkpoint, state = root / "checkpoint", root / "state"
    state_backend = backend_class(backend)(f"file://{state.resolve()}")
    if not inputs.exists() or not any(inputs.iterdir()):
        count = generate_readings(inputs, files, per_file, sensors)
        say(f"generated {count} readings from {sensors} sensors in {files} files under {inputs}")
    else:
        say(f"reading sensor files from {inputs}")
    say("starting Spark (local[2]) ...")
    spark = _session()
    try:
        readings = (
            spark.readStream.format("firesteel.files")
            .schema(INPUT_SCHEMA)
            .option("format", "json")
            .option("max.files.per.batch", str(files_per_batch))
            .load(str(inputs))
        )
        statistics = stateful(
            readings,
            key="sensor",
            processor=SensorStatistics(),
            output_schema=OUTPUT_SCHEMA,
            backend=state_backend,
            name="sensor-statistics",
        )
        query = (
            statistics.writeStream.format("firesteel.files")
            .option("path", str(output))
            .option("format", "parquet")
            .option("guarantee", "exactly-once")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        say(
            f"running the query ({files_per_batch} files per micro-batch) "
            f"({time.monotonic() - started:.1f}s) ..."
        )
        watcher = threading.Thread(target=_watch, args=(query, started, say), daemon=True)
        watcher.start()
        query.awaitTermination()
        watcher.join()
    finally:
        spark.stop()
    latest = latest_per_sensor(str(output))
    records: list[dict[str, Any]] = list(read_guarantee(str(checkpoint)).values())
    guarantee = records[0].get("achieved", "unknown") if records else "unknown"
    say("")
    say(f"{'sensor':12} {'count':>6} {'mean':>7} {'min':>7} {'max':>7}  last seen")
    for row in latest:
        say(
            f"{row['sensor']:12} {row['count']:6d} {row['mean']:7.2f} {row['min']:7.2f} "
            f"{row['max']:7.2f}  {row['last_seen']:%Y-%m-%d %H:%M:%S}"
        )
    say("")
    say(f"output (Parquet, one row per sensor per batch): {output}")
    say("  read it with: firesteel.files.read_committed(path); newest batch_id per sensor wins")
    say(f"keyed state ({state_backend.name} backend): {state}")
    say(f"  inspect it with: firesteel state {state}")
    say(f"guarantee: {guarantee} (firesteel.files source -> stateful operator -> files sink)")
    say(f"done in {time.monotonic() - started:.1f}s")
    return latest


def parser() -> argparse.ArgumentParser:
    """The demo's command line (also used by ``firesteel demo``)."""
    parser = argparse.ArgumentParser(
        prog="firesteel demo",
        description="Per-sensor running statistics in keyed state, written exactly-once.",
    )
    parser.add_argument(
        "--dir", default="firesteel-demo", help="working folder (default: ./firesteel-demo)"
    )
    parser.add_argument("--files", type=int, default=20, help="files to generate when empty")
    parser.add_argument("--readings", type=int, default=500, help="readings per generated file")
    parser.add_argument("--sensors", type=int, default=25, help="sensors in generated files")
    parser.add_argument("--files-per-batch", type=int, default=4, help="admission control")
    parser.add_argument(
        "--backend",
        default="filesystem",
        choices=("filesystem", "heap", "rocksdb"),
        help="state backend (default: filesystem; rocksdb needs firesteel-rocksdb)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m firesteel.examples.demo``."""
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    run(
        Path(args.dir).resolve(),
        files=args.files,
        per_file=args.readings,
        sensors=args.sensors,
        files_per_batch=args.files_per_batch,
        backend=args.backend,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
