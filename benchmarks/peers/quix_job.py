"""Quix Streams' side of the peers group, run by the interpreter of its own virtual environment.

``python quix_job.py {identity,count} BOOTSTRAP SOURCE TARGET STATE_DIR [--commit-interval S]``:
one Quix ``Application`` with ``processing_guarantee="exactly-once"`` (Kafka
transactions), reading ``SOURCE`` from the beginning in a fresh consumer group and
writing ``TARGET``; ``count`` keeps a running count per message key in Quix's
RocksDB state and writes it as the decimal value under the key. Runs until killed.
Imports nothing of firesteel: only the peer's own packages are installed here.
"""

from __future__ import annotations

import argparse
import json
import uuid
from typing import Any

from quixstreams import Application


def count(value: Any, state: Any) -> bytes:
    total = state.get("count", 0) + 1
    state.set("count", total)
    return str(total).encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("workload", choices=["identity", "count"])
    parser.add_argument("bootstrap")
    parser.add_argument("source")
    parser.add_argument("target")
    parser.add_argument("state_dir")
    parser.add_argument("--commit-interval", type=float, default=5.0)
    args = parser.parse_args()
    app = Application(
        broker_address=args.bootstrap,
        consumer_group=f"peers-quix-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        commit_interval=args.commit_interval,
        state_dir=args.state_dir,
        loglevel="WARNING",
    )
    source = app.topic(args.source, key_deserializer="bytes", value_deserializer="bytes")
    target = app.topic(args.target, key_serializer="bytes", value_serializer="bytes")
    frame = app.dataframe(source)
    if args.workload == "count":
        frame = frame.apply(count, stateful=True)
    frame.to_topic(target)
    print(json.dumps({"event": "ready"}), flush=True)
    app.run()


if __name__ == "__main__":
    main()
