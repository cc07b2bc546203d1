"""Interval join: ad impressions and clicks -> each click joined with the impressions of the
same ad in the 10 minutes before it, state purged as the watermark passes.

Run it with ``python -m firesteel.examples.interval_join [--dir DIR]``. Impressions are the
left input, clicks the right one (``stateful(impressions, ..., right=clicks)``); an impression
waits in keyed state until the watermark is 10 minutes past it, a click until the watermark
reaches it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
from pathlib import Path
from typing import Any

from firesteel.examples.eventtime import read_json_stream, run_exactly_once, session, write_batches

IMPRESSIONS = [
    [{"ad": "a1", "shown_to": "ann", "at": 0}, {"ad": "a2", "shown_to": "bob", "at": 30}],
    [{"ad": "a1", "shown_to": "cid", "at": 700}],
    [],
]
CLICKS = [
    [{"ad": "a1", "clicked_by": "ann", "at": 120}],
    [{"ad": "a1", "clicked_by": "cid", "at": 760}],
    [{"ad": "a2", "clicked_by": "bob", "at": 900}],
]
"""Batches of each input (seconds after the examples' epoch): bob's click comes too late
for his impression (870 s after it)."""


def joined(impressions: Any, clicks: Any, state: str) -> Any:
    """Clicks joined with the impressions of the 10 minutes before them."""
    from firesteel.backends import FilesystemBackend
    from firesteel.state import BoundedOutOfOrderness, stateful
    from firesteel.state.joins import IntervalJoin

    return stateful(
        impressions,
        key="ad",
        processor=IntervalJoin(lower=dt.timedelta(0), upper=dt.timedelta(minutes=10)),
        output_schema=(
            "ad string, shown_to string, ts timestamp, clicked_by string, right_ts timestamp"
        ),
        backend=FilesystemBackend(state),
        name="impression-clicks",
        right=clicks,
        event_time="ts",
        watermark=BoundedOutOfOrderness(dt.timedelta(seconds=30)),
    )


def run(root: Path, spark: Any) -> list[dict[str, Any]]:
    """Write both inputs under ``root``, run the job; the joined rows."""
    write_batches(root / "impressions", IMPRESSIONS)
    write_batches(root / "clicks", CLICKS)
    impressions = read_json_stream(spark, root / "impressions", "ad string, shown_to string")
    clicks = read_json_stream(spark, root / "clicks", "ad string, clicked_by string")
    found, _ = run_exactly_once(joined(impressions, clicks, f"file://{root / 'state'}"), root)
    return found


def main(argv: list[str] | None = None) -> int:
    """``python -m firesteel.examples.interval_join``."""
    parser = argparse.ArgumentParser(prog="python -m firesteel.examples.interval_join")
    parser.add_argument("--dir", type=Path, help="working folder (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        spark = session("firesteel-interval-join")
        try:
            found = run(args.dir or Path(scratch), spark)
        finally:
            spark.stop()
    for row in sorted(found, key=lambda r: r["ts"]):
        sys.stdout.write(
            f"{row['ad']}: shown to {row['shown_to']} at {row['ts']:%H:%M:%S}, "
            f"clicked by {row['clicked_by']} at {row['right_ts']:%H:%M:%S}\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
