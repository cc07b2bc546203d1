"""Sessionizer: clicks per user -> session windows (a 10-minute gap) -> one row per session.

Run it with ``python -m firesteel.examples.sessionizer [--dir DIR]``. Three micro-batches
of clicks arrive out of order; a session is emitted once the watermark (the latest click
minus 1 minute) passes its end; a click up to 5 minutes later still joins its session,
which is emitted again, updated (ann's ``pay``); a click later than that goes to the side
output (bob's ``back``). The last sessions stay open until later clicks move the watermark.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
from pathlib import Path
from typing import Any

from firesteel.examples.eventtime import read_json_stream, run_exactly_once, session, write_batches

CLICKS = [
    [
        {"user": "ann", "page": "home", "at": 0},
        {"user": "bob", "page": "home", "at": 60},
        {"user": "ann", "page": "cart", "at": 300},
        {"user": "bob", "page": "help", "at": 1_000},
    ],
    [{"user": "ann", "page": "pay", "at": 100}, {"user": "bob", "page": "home", "at": 2_400}],
    [{"user": "bob", "page": "back", "at": 30}, {"user": "ann", "page": "home", "at": 4_000}],
]
"""Batches of clicks: seconds after the examples' epoch."""


def sessions(clicks: Any, state: str) -> Any:
    """Session windows per user over ``clicks``: ``user, window_start, window_end, count``
    (and late clicks in ``__late``)."""
    from firesteel.backends import FilesystemBackend
    from firesteel.state import BoundedOutOfOrderness, stateful
    from firesteel.state.windows import Count, EventTimeSessionWindows, WindowAggregate

    return stateful(
        clicks,
        key="user",
        processor=WindowAggregate(
            EventTimeSessionWindows(dt.timedelta(minutes=10)),
            Count("clicks"),
            allowed_lateness=dt.timedelta(minutes=5),
        ),
        output_schema="user string, window_start timestamp, window_end timestamp, clicks long",
        backend=FilesystemBackend(state),
        name="sessions",
        event_time="ts",
        watermark=BoundedOutOfOrderness(dt.timedelta(minutes=1)),
    )


def run(root: Path, spark: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Write the clicks under ``root``, run the job; its sessions and late clicks."""
    write_batches(root / "input", CLICKS)
    clicks = read_json_stream(spark, root / "input", "user string, page string")
    return run_exactly_once(sessions(clicks, f"file://{root / 'state'}"), root)


def main(argv: list[str] | None = None) -> int:
    """``python -m firesteel.examples.sessionizer``."""
    parser = argparse.ArgumentParser(prog="python -m firesteel.examples.sessionizer")
    parser.add_argument("--dir", type=Path, help="working folder (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        spark = session("firesteel-sessionizer")
        try:
            found, late = run(args.dir or Path(scratch), spark)
        finally:
            spark.stop()
    for row in sorted(found, key=lambda r: (r["user"], r["window_start"])):
        sys.stdout.write(
            f"{row['user']:5} {row['window_start']:%H:%M:%S} - {row['window_end']:%H:%M:%S}"
            f"  {row['clicks']} clicks\n"
        )
    for row in late:
        sys.stdout.write(f"late: {row['user']} {row['page']} at {row['ts']:%H:%M:%S}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
