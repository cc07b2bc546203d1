"""``python -m benchmarks.requests [--quick] [--batches N]``: S3 requests per micro-batch.

Object stores bill per request, so each path must cost the same number of
requests in its 2,000th batch as in its 100th: nothing may list everything
ever written. This runs many tiny batches of each path against an S3 API
server process (moto, :class:`firesteel.testing.s3.S3Server`) and counts the
requests at the server, from its request log, not in firesteel
(:mod:`firesteel.testing.store_requests`):

- ``wal``: the write-ahead-log sink, segments, plans and commit markers on S3
  (two tasks of ten rows per batch);
- ``state-filesystem`` / ``state-rocksdb``: a keyed-state snapshot per task and
  batch (two tasks, eight keys), ``retain=10``, the filesystem backend's full
  snapshot every 10 batches;
- ``files-sink``: the two-phase-commit file sink writing Parquet to an ``s3a://``
  prefix (two tasks of ten rows per batch), built and prepared again for every
  batch as Spark does;
- ``files-source``: the file source reading an ``s3a://`` prefix where two new
  Parquet files arrive before every batch (their uploads are not counted),
  ``cleanup=archive`` to another prefix of the bucket;
- ``files-source-keep``: the same with ``cleanup=none``, which leaves every file
  read in the prefix. Its requests per batch grow: pyarrow lists the whole
  prefix, one LIST request per 1,000 keys, so one more request per batch for
  every 500 batches here. Listing from the last key seen (S3's ``start-after``)
  would keep it flat only where new files sort after old ones, which arrival
  order does not promise, and ``pyarrow.fs`` has no such listing; archive or
  delete what was read to keep an object-store prefix cheap.

For each path it prints the mean requests per batch by kind (LIST, GET, HEAD,
PUT, DELETE, POST) over the first and the last 100 batches (``--quick``: 60
batches, first and last 20), and writes them to ``benchmarks/results/requests.json``
with the mean of all requests per batch in every window of the run (``all_by_window``:
where a path grows, the steps show), one path at a time as each finishes
(``--quick``: to the system temp folder, so a smoke run never replaces a real one),
keeping the figures of paths not run this time.
Counts are deterministic: the same code gives the same figures on any machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from benchmarks import report
from firesteel.testing.s3 import KINDS, S3Server
from firesteel.testing.store_requests import (
    files_sink_batches,
    files_source_batches,
    state_batches,
    wal_batches,
)

HERE = Path(__file__).resolve().parent
FULL_BATCHES, FULL_WINDOW = 2000, 100
QUICK_BATCHES, QUICK_WINDOW = 60, 20

Workload = Callable[[S3Server, Path, int], list[Counter[str]]]
WORKLOADS: dict[str, Workload] = {
    "wal": wal_batches,
    "state-filesystem": lambda server, work, n: state_batches(server, "filesystem", work, n),
    "state-rocksdb": lambda server, work, n: state_batches(server, "rocksdb", work, n),
    "files-sink": files_sink_batches,
    "files-source": files_source_batches,
    "files-source-keep": lambda server, work, n: files_source_batches(server, work, n, "none"),
}


def means(counts: list[Counter[str]]) -> dict[str, float]:
    """Mean requests per batch of ``counts``, by kind and in all."""
    figures = {kind: statistics.fmean(c[kind] for c in counts) for kind in KINDS}
    figures["all"] = statistics.fmean(sum(c.values()) for c in counts)
    return figures


def _save(out: Path, name: str, figures: dict[str, object]) -> None:
    """Write one path's figures into ``out/requests.json`` as soon as it is measured,
    keeping every other path's: paths run separately (in parallel, or on another day)
    keep each other's figures, and a long run that stops keeps what it finished."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / "requests.json"
    earlier = json.loads(target.read_text()) if target.exists() else {}
    target.write_text(json.dumps({**earlier, name: figures}, indent=2, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.requests", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="60 batches, windows of 20")
    parser.add_argument("--batches", type=int, help="batches per path (default 2,000)")
    parser.add_argument("paths", nargs="*", help=f"some of {', '.join(WORKLOADS)} (default: all)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.paths) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown path {unknown[0]!r}; choose from {', '.join(WORKLOADS)}")
    batches = args.batches or (QUICK_BATCHES if args.quick else FULL_BATCHES)
    window = min(QUICK_WINDOW if args.quick else FULL_WINDOW, batches // 2)
    out = Path(tempfile.gettempdir()) if args.quick else HERE / "results"
    with tempfile.TemporaryDirectory(prefix="firesteel-requests-") as scratch:
        work = Path(scratch)
        server = S3Server(work / "s3").start()
        try:
            for name in args.paths or list(WORKLOADS):
                (work / name).mkdir()
                counts = WORKLOADS[name](server, work / name, batches)
                first, last = means(counts[:window]), means(counts[-window:])
                windows = [
                    statistics.fmean(sum(c.values()) for c in counts[i : i + window])
                    for i in range(0, batches - window + 1, window)
                ]
                figures = {"batches": batches, "window": window, "first": first, "last": last}
                _save(out, name, {**figures, "all_by_window": windows})
                row = "  ".join(f"{k} {first[k]:.1f} -> {last[k]:.1f}" for k in (*KINDS, "all"))
                sys.stdout.write(f"{name}: {row}\n")
                sys.stdout.flush()
        finally:
            server.stop()
    if not args.quick:
        report.write_report(out, HERE / "RESULTS.md")
    sys.stdout.write(f"requests per batch, first {window} -> last {window} of {batches}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
