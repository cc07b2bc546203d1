"""Timeout detector: sensor heartbeats -> an alert when a sensor is silent for 2 minutes of
event time (an event-time timer per sensor, moved on every heartbeat).

Run it with ``python -m firesteel.examples.timeouts [--dir DIR]``. The alert of a silent
sensor comes in the first micro-batch whose watermark (the latest heartbeat of any sensor
minus 30 s) passes the sensor's last heartbeat plus 2 minutes: event time, so the same
input gives the same alerts however fast it is replayed, and after any crash.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
from pathlib import Path
from typing import Any

from firesteel.examples.eventtime import read_json_stream, run_exactly_once, session, write_batches
from firesteel.state import KeyedProcessor, KeyState, ValueStateDescriptor
from firesteel.state.eventtime import epoch_ms

SILENCE_MS = 120_000

HEARTBEATS = [
    [{"sensor": "s1", "at": 0}, {"sensor": "s2", "at": 10}],
    [{"sensor": "s1", "at": 100}, {"sensor": "s2", "at": 60}],
    [{"sensor": "s1", "at": 200}],
    [{"sensor": "s1", "at": 330}],
    [{"sensor": "s1", "at": 400}],
]
"""Batches of heartbeats (seconds after the examples' epoch): s2 falls silent after 60 s."""


class SilenceDetector(KeyedProcessor):
    """Keeps one event-time timer per sensor at its last heartbeat + :data:`SILENCE_MS`."""

    deadline = ValueStateDescriptor("deadline", int)

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        latest = max(t for t in epoch_ms(rows.column("ts")).to_pylist() if t is not None)
        deadline = state.value(self.deadline)
        previous = deadline.value()
        if previous is None or latest + SILENCE_MS > previous:
            if previous is not None:
                state.delete_event_time_timer(previous)
            state.register_event_time_timer(latest + SILENCE_MS)
            deadline.update(latest + SILENCE_MS)
        return None

    def on_timer(self, key: Any, timestamp_ms: int, state: KeyState) -> Any:
        state.value(self.deadline).clear()
        silent_since = dt.datetime.fromtimestamp(
            (timestamp_ms - SILENCE_MS) / 1000, dt.timezone.utc
        )
        yield {"sensor": key[0], "silent_since": silent_since}


def alerts(heartbeats: Any, state: str) -> Any:
    """One row per sensor that fell silent: ``sensor, silent_since``."""
    from firesteel.backends import FilesystemBackend
    from firesteel.state import BoundedOutOfOrderness, stateful

    return stateful(
        heartbeats,
        key="sensor",
        processor=SilenceDetector(),
        output_schema="sensor string, silent_since timestamp",
        backend=FilesystemBackend(state),
        name="silence",
        event_time="ts",
        watermark=BoundedOutOfOrderness(dt.timedelta(seconds=30)),
    )


def run(root: Path, spark: Any) -> list[dict[str, Any]]:
    """Write the heartbeats under ``root``, run the job; its alerts."""
    write_batches(root / "input", HEARTBEATS)
    heartbeats = read_json_stream(spark, root / "input", "sensor string")
    found, _ = run_exactly_once(alerts(heartbeats, f"file://{root / 'state'}"), root)
    return found


def main(argv: list[str] | None = None) -> int:
    """``python -m firesteel.examples.timeouts``."""
    parser = argparse.ArgumentParser(prog="python -m firesteel.examples.timeouts")
    parser.add_argument("--dir", type=Path, help="working folder (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        spark = session("firesteel-timeouts")
        try:
            found = run(args.dir or Path(scratch), spark)
        finally:
            spark.stop()
    for row in found:
        sys.stdout.write(f"{row['sensor']} silent since {row['silent_since']:%H:%M:%S}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
