"""``firesteel status CHECKPOINT...``: how a query is doing, read from its checkpoint alone.

For each checkpoint: Spark's query id, the last batch whose offsets Spark logged
and the last it committed (with the commit's age), the guarantee each firesteel
sink runs with, how far each source that records it (Kafka) had its committed position
behind the log end when it last planned a batch, and each sink's committed totals and last
batches (rows, bytes,
the time from Spark planning the batch to the sink's commit, the slowest task's
write time, the commit's time, the counters its tasks add), and a phases table (the
commit's parts, each stateful operator's snapshot, its bytes written and its state's size).
It reads files only, so it works for a stopped query as for a running one. Given a
pipeline's work folder, it lists each streamlet's queries and progress (last batch, rows
in and out, lag: :mod:`firesteel.pipelines.progress`).
``--json`` prints the same as one JSON document; ``--watch S`` repeats every S
seconds; ``--state LOCATION`` adds the files and bytes each operator stores there
(``--keys`` also counts its keys and entries, ``--key-groups`` per key group);
``--prometheus PORT`` serves the checkpoints as
Prometheus metrics (:mod:`firesteel.core.metrics.prometheus`) until interrupted.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from pyarrow import fs

from firesteel.cli.args import EXIT_USAGE, command_parser
from firesteel.core.checkpoint import read_guarantee, read_query_id, read_savepoints_taken
from firesteel.core.errors import FiresteelError, MissingDependencyError
from firesteel.core.metrics.history import BatchRecord, read_history
from firesteel.core.metrics.sources import BAD_RECORDS, read_source_progress
from firesteel.core.storage import resolve


def _last_batch(fsys: fs.FileSystem, folder: str) -> tuple[int | None, float | None]:
    """The highest batch file in a Spark log folder and its modification time."""
    infos = fsys.get_file_info(fs.FileSelector(folder, allow_not_found=True))
    batches = [(int(i.base_name), i) for i in infos if i.base_name.isdigit()]
    if not batches:
        return None, None
    batch, info = max(batches, key=lambda pair: pair[0])
    return batch, info.mtime.timestamp() if info.mtime else None


def _batch_started(fsys: fs.FileSystem, base: str, batch: int) -> float | None:
    """When Spark planned ``batch``: ``batchTimestampMs`` of ``offsets/<batch>``, in seconds."""
    try:
        with fsys.open_input_stream(f"{base}/offsets/{batch}") as stream:
            metadata = stream.read().decode("utf-8").splitlines()[1]
        return float(json.loads(metadata)["batchTimestampMs"]) / 1000
    except (FileNotFoundError, IndexError, KeyError, ValueError):
        return None


def require_checkpoint(checkpoint: str) -> tuple[fs.FileSystem, str]:
    """The filesystem and path of a Spark checkpoint; :class:`FileNotFoundError` naming the
    location when it holds no query metadata."""
    location = resolve(checkpoint)
    fsys, base = location.filesystem, location.path
    if fsys.get_file_info(f"{base}/metadata").type != fs.FileType.File:
        msg = f"{checkpoint} is not a Spark checkpoint (it has no metadata file)"
        raise FileNotFoundError(msg)
    return fsys, base


def query_status(checkpoint: str, last: int = 10) -> dict[str, Any]:
    """Everything ``firesteel status`` shows of one checkpoint, as plain data."""
    fsys, base = require_checkpoint(checkpoint)
    offsets, _ = _last_batch(fsys, f"{base}/offsets")
    committed, committed_at = _last_batch(fsys, f"{base}/commits")
    history = read_history(checkpoint, last=last)
    return {
        "checkpoint": checkpoint,
        "query_id": read_query_id(checkpoint),
        "last_logged_batch": offsets,
        "last_committed_batch": committed,
        "last_committed_at": committed_at,
        "guarantees": read_guarantee(checkpoint),
        "sources": read_source_progress(checkpoint),
        "savepoints": read_savepoints_taken(checkpoint),
        "sinks": {
            sink: {
                "totals": records[-1].totals if records else {},
                "histograms": records[-1].histograms if records else {},
                "batches": [_shown(r, fsys, base) for r in records],
            }
            for sink, records in history.items()
        },
    }


def _shown(record: BatchRecord, fsys: fs.FileSystem, base: str) -> dict[str, Any]:
    """A batch as status shows it: the record without its running histograms (the sink's
    latest are shown once), with its duration and each operator's incremental share."""
    batch = asdict(record)
    del batch["histograms"]
    for figures in batch["operators"].values():
        if figures.get("state_bytes"):
            figures["incremental_share"] = figures["snapshot_bytes"] / figures["state_bytes"]
    return _with_duration(batch, fsys, base)


def state_status(location: str, keys: bool = False, key_groups: bool = False) -> dict[str, Any]:
    """Per operator under a state location: files and bytes stored (every retained version,
    whichever backend wrote them) and, with ``keys``, the keys and entries of the latest
    version; with ``key_groups``, the same per key group (both read the whole state, so
    they are exact on every backend). Entries are values, list elements, map entries and
    timers, firesteel's own entries (``__...``) left out."""
    from firesteel.backends.inspect import list_operators, read_state

    resolved = resolve(location)
    fsys, base = resolved.filesystem, resolved.path
    operators = {}
    for operator in list_operators(location):
        infos = fsys.get_file_info(fs.FileSelector(f"{base}/{operator}", recursive=True))
        files = [i for i in infos if i.type == fs.FileType.File]
        shown: dict[str, Any] = {"files": len(files), "bytes": sum(i.size or 0 for i in files)}
        if keys or key_groups:
            table = read_state(location, operator=operator)
            user = table.filter(pc.invert(pc.starts_with(table["state"], "__")))
            shown["keys"] = len(pc.unique(user["key"]))
            shown["entries"] = user.num_rows
        if key_groups:
            grouped = user.group_by("key_group").aggregate(
                [("key", "count_distinct"), ("key", "count")]
            )
            shown["key_groups"] = {
                str(row["key_group"]): {
                    "keys": row["key_count_distinct"],
                    "entries": row["key_count"],
                }
                for row in sorted(grouped.to_pylist(), key=lambda row: row["key_group"])
            }
        operators[operator] = shown
    return {"location": location, "operators": operators}


def _with_duration(batch: dict[str, Any], fsys: fs.FileSystem, base: str) -> dict[str, Any]:
    """The record plus ``batch_seconds``: from Spark planning the batch to the sink's commit
    (the batch's whole cost as a user waits for it, its fixed cost included)."""
    started = _batch_started(fsys, base, batch["batch"])
    batch["batch_seconds"] = batch["committed_at"] - started if started is not None else None
    return batch


def _age(seconds: float | None, now: float) -> str:
    if seconds is None:
        return "never"
    return f"{now - seconds:.0f} s ago"


def _seconds(value: float | None) -> str:
    return f"{value:7.2f}" if value is not None else "      -"


def render(status: dict[str, Any], now: float) -> str:
    """The text form of :func:`query_status`."""
    lines = [f"query {status['query_id']} at {status['checkpoint']}"]
    logged, committed = status["last_logged_batch"], status["last_committed_batch"]
    running = " (the next one is running or was interrupted)" if logged != committed else ""
    lines.append(
        f"  last committed batch: {committed}, {_age(status['last_committed_at'], now)}; "
        f"last logged: {logged}{running}"
    )
    for sink, record in status["guarantees"].items():
        sources = ", ".join(record["sources"]) or "no sources logged yet"
        lines.append(f"  sink {sink} ({record['sink']}): {record['achieved']} from {sources}")
    for source, progress in status["sources"].items():
        behind = ", ".join(f"{tp} {lag:,}" for tp, lag in sorted(progress["lag"].items()))
        lines.append(
            f"  source {source}: {progress['lag_total']:,} committed records behind the log "
            f"end when it last planned a batch ({_age(progress['at'], now)}): {behind}"
        )
        bad = progress.get(BAD_RECORDS, {})
        if any(bad.values()):
            lines.append(
                f"  source {source}: bad records {bad['skipped']:,} skipped, "
                f"{bad['quarantined']:,} quarantined (dead letters)"
            )
    for sink, shown in status["sinks"].items():
        totals = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(shown["totals"].items()))
        lines.append(f"  sink {sink} totals: {totals}")
        last = shown["batches"][-1] if shown["batches"] else None
        if last is not None and "oldest_record_age_seconds" in last["maxima"]:
            lines.append(
                f"  sink {sink}: the oldest record batch {last['batch']} read was "
                f"{last['maxima']['oldest_record_age_seconds']:,.1f} s old when fetched"
            )
        lines.append(
            "    batch  committed  tasks       rows        bytes  batch s  write s  commit s"
        )
        for batch in shown["batches"]:
            lines.append(
                f"    {batch['batch']:5}  {_age(batch['committed_at'], now):>9}  "
                f"{batch['tasks']:5}  {batch['input_rows']:9,}  {batch['input_bytes']:11,}  "
                f"{_seconds(batch['batch_seconds'])}  "
                f"{batch['write_seconds']:7.2f}  {batch['commit_seconds']:8.2f}"
            )
        lines.extend(_phases(shown["batches"]))
    for taken in status["savepoints"]:
        lines.append(
            f"  savepoint {taken['id']} of batch {taken['batch']} at {taken['location']} "
            f"({_age(taken['taken_at'], now)}): {', '.join(taken['operators'])}"
        )
    for state in status.get("state", []):
        for operator, shown in state["operators"].items():
            keys = ""
            if "keys" in shown:
                keys = f", {shown['keys']:,} keys, {shown['entries']:,} entries"
            lines.append(
                f"  state {operator} at {state['location']}: {shown['files']} files, "
                f"{shown['bytes']:,} bytes stored{keys}"
            )
            if "key_groups" in shown:
                lines.append("    key group   keys  entries")
                lines.extend(
                    f"    {group:>9}  {counts['keys']:5,}  {counts['entries']:7,}"
                    for group, counts in shown["key_groups"].items()
                )
    return "\n".join(lines) + "\n"


def is_pipeline_work(location: str) -> bool:
    """Whether ``location`` is a pipeline's work folder (``firesteel run-local --work``):
    a local folder with streamlets' checkpoints and no query metadata of its own."""
    folder = Path(location)
    return (folder / "checkpoints").is_dir() and not (folder / "metadata").exists()


def pipeline_status(work: str) -> dict[str, Any]:
    """Each streamlet of a pipeline's work folder: its queries' checkpoints and progress,
    and each topic with its producers and its consumers' lag
    (:mod:`firesteel.pipelines.progress`)."""
    try:
        from firesteel.pipelines.progress import pipeline_progress, topic_flows
    except ImportError as exc:
        package = "firesteel.pipelines"
        raise MissingDependencyError(package, "firesteel-pipelines") from exc
    folder = Path(work)
    progress = pipeline_progress(folder)
    streamlets = []
    for shown in progress:
        checkpoints = folder / "checkpoints" / shown.streamlet
        queries = sorted(str(p) for p in checkpoints.iterdir() if (p / "metadata").is_file())
        streamlets.append({**asdict(shown), "checkpoints": queries})
    return {"pipeline": work, "streamlets": streamlets, "topics": topic_flows(folder, progress)}


def _rendered(status: dict[str, Any], now: float) -> str:
    if "pipeline" not in status:
        return render(status, now)
    from firesteel.pipelines.progress import StreamletProgress, progress_line

    lines = [f"pipeline at {status['pipeline']}: {len(status['streamlets'])} streamlets"]
    for streamlet in status["streamlets"]:
        checkpoints = streamlet.pop("checkpoints")
        lines.append(f"  {progress_line(StreamletProgress(**streamlet), now)}")
        lines.extend(f"    query {checkpoint}" for checkpoint in checkpoints)
    return "\n".join(lines) + "\n"


def _phases(batches: list[dict[str, Any]]) -> list[str]:
    """The phases table: seconds per batch in the slowest task's read, process and write
    (:mod:`firesteel.core.metrics.task`), the driver's commit and each of its parts, and
    the slowest snapshot of each operator; then the operators' snapshot bytes and state
    size."""
    if not batches:
        return []
    parts = sorted({part for batch in batches for part in batch["commit_phases"]})
    operators = sorted({op for batch in batches for op in batch["operators"]})
    head = ["read s", "process s", "write s", "commit s", *(f"{p} s" for p in parts)]
    head += [f"snapshot s ({op})" for op in operators]
    lines = ["    phases:  batch  " + "  ".join(f"{h:>9}" for h in head)]
    for batch in batches:
        cells = [batch.get("read_seconds"), batch.get("process_seconds")]
        cells += [batch["write_seconds"], batch["commit_seconds"]]
        cells += [batch["commit_phases"].get(p) for p in parts]
        cells += [batch["operators"].get(op, {}).get("snapshot_seconds") for op in operators]
        shown = "  ".join(f"{c:9.3f}" if c is not None else f"{'-':>9}" for c in cells)
        lines.append(f"             {batch['batch']:5}  {shown}")
    last = batches[-1]
    for operator, figures in sorted(last["operators"].items()):
        size = ""
        if "state_bytes" in figures:
            share = figures.get("incremental_share", 0.0)
            size = f" of {figures['state_bytes']:,.0f} ({share:.0%} incremental)"
        entries = f", {figures['state_entries']:,.0f} entries" if "state_entries" in figures else ""
        if "state_entries_estimate" in figures:
            entries += f", ~{figures['state_entries_estimate']:,.0f} entries (RocksDB's estimate)"
        lines.append(
            f"    operator {operator} batch {last['batch']}: snapshot "
            f"{figures.get('snapshot_bytes', 0):,.0f} bytes written{size}{entries}"
        )
    return lines


def main(argv: list[str]) -> int:
    """Run ``firesteel status``; 2 when a location is not a checkpoint."""
    parser = command_parser(
        "firesteel status",
        (__doc__ or "").split("\n\n")[1],
        "firesteel status /tmp/firesteel-demo/checkpoint --last 5",
    )
    parser.add_argument(
        "checkpoint",
        nargs="+",
        help="a query's checkpoint location, or a pipeline's work folder (its streamlets)",
    )
    parser.add_argument("--last", type=int, default=10, help="batches shown per sink")
    parser.add_argument("--json", action="store_true", help="one JSON document")
    parser.add_argument("--watch", type=float, metavar="S", help="repeat every S seconds")
    parser.add_argument("--prometheus", type=int, metavar="PORT", help="serve /metrics")
    parser.add_argument(
        "--state",
        action="append",
        default=[],
        metavar="LOCATION",
        help="a state backend's location to show per operator (repeatable)",
    )
    parser.add_argument("--keys", action="store_true", help="count the keys of --state (reads it)")
    parser.add_argument(
        "--key-groups", action="store_true", help="count keys and entries per key group (reads it)"
    )
    args = parser.parse_args(argv)
    try:
        if args.prometheus is not None:
            return _serve(args.prometheus, args.checkpoint)
        while True:
            shown = [
                pipeline_status(c) if is_pipeline_work(c) else query_status(c, args.last)
                for c in args.checkpoint
            ]
            if args.state:
                shown[0]["state"] = [
                    state_status(loc, args.keys, args.key_groups) for loc in args.state
                ]
            if args.json:
                sys.stdout.write(json.dumps(shown if len(shown) > 1 else shown[0], indent=2))
                sys.stdout.write("\n")
            else:
                sys.stdout.write("".join(_rendered(s, time.time()) for s in shown))
            sys.stdout.flush()
            if args.watch is None:
                return 0
            time.sleep(args.watch)
    except (FileNotFoundError, FiresteelError) as exc:
        parser.exit(EXIT_USAGE, f"{parser.prog}: error: {exc}\n")
    except KeyboardInterrupt:
        return 0


def _serve(port: int, checkpoints: list[str]) -> int:
    from firesteel.core.metrics.prometheus import serve_prometheus

    for checkpoint in checkpoints:
        require_checkpoint(checkpoint)
    queries = {checkpoint: checkpoint for checkpoint in checkpoints}
    server = serve_prometheus(port, queries)
    sys.stdout.write(f"serving http://127.0.0.1:{port}/metrics for {', '.join(queries)}\n")
    sys.stdout.flush()
    try:
        while True:
            time.sleep(3600)
    finally:
        server.shutdown()
