"""How far each streamlet of a running pipeline has got, read from files alone.

``firesteel run-local`` / ``run`` print :func:`progress_line` every ``--progress`` seconds
while the pipeline runs (a person waiting for the first output sees the streamlets move),
and ``firesteel status`` on a pipeline's work folder lists :func:`pipeline_progress`.
Per streamlet, over its queries' checkpoints (``<work>/checkpoints/<streamlet>/<query>``):

- ``batch``: the last batch its queries committed (Spark's ``commits/N``), and when;
- ``rows_out``: the rows its firesteel sinks committed (the batch records' totals,
  :mod:`firesteel.core.metrics.history`): what its outlets were handed;
- ``rows_in`` and ``lag`` on local topics: the rows of the topic files its queries'
  committed positions have read, and of those they have not yet (each file's Parquet
  footer: the topic's files are immutable once published, so each is read once); found
  through the file source's discovered-file log in the topic's folder, which names the
  files in the order the source's positions count them (before a query's first commit,
  neither is known). A topic two queries of the streamlet read counts as far as the slower
  one has got;
- ``lag`` on Kafka topics: the committed records behind the log end when its source
  last planned a batch (the Kafka source's record); ``rows_in`` is then unknown (a
  Kafka position also counts transaction markers), shown as ``-``.

The pipeline's topology (which outlets write each topic and which inlets read it) is
recorded in ``<work>/topology.json`` when its streamlets are hosted
(:func:`record_topology`); :func:`topic_flows` joins it with the progress: per topic, its
producers and each consumer's lag (what ``firesteel ui`` draws).
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import pyarrow.parquet as pq

from firesteel.core import read_history, read_source_progress
from firesteel.core.toolkit import Folder, read_record
from firesteel.pipelines.verify import VerifiedBlueprint

__all__ = [
    "TOPOLOGY",
    "ProgressPrinter",
    "StreamletProgress",
    "as_json",
    "pipeline_progress",
    "progress_line",
    "record_topology",
    "streamlet_progress",
    "streamlets",
    "topic_flows",
]

TOPOLOGY = "topology.json"
"""The pipeline's topics with their producers and consumers, in its work folder."""
_TOPIC_RECORDS = "_firesteel"
"""Where the file sink and source keep their records inside a local topic's folder."""


@dataclass
class StreamletProgress:
    """One streamlet's progress (module docs)."""

    streamlet: str
    queries: int = 0
    batch: int | None = None
    committed_at: float | None = None
    rows_out: int = 0
    rows_in: int | None = None
    lag: dict[str, int] = field(default_factory=dict)
    """Per inlet topic: rows (local topics) or records (Kafka) not yet read."""


class _FooterRows:
    """Rows of each topic file by path, read from its Parquet footer once."""

    def __init__(self) -> None:
        self.rows: dict[Path, int] = {}

    def __call__(self, path: Path) -> int:
        if path not in self.rows:
            self.rows[path] = pq.ParquetFile(path).metadata.num_rows
        return self.rows[path]


def _checkpoints(work: Path, streamlet: str) -> list[Path]:
    folder = work / "checkpoints" / streamlet
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if (p / "metadata").is_file())


def _last_commit(checkpoint: Path) -> tuple[int | None, float | None]:
    commits = [p for p in (checkpoint / "commits").glob("[0-9]*") if p.name.isdigit()]
    if not commits:
        return None, None
    last = max(commits, key=lambda p: int(p.name))
    return int(last.name), last.stat().st_mtime


def _file_positions(checkpoint: Path, batch: int) -> list[dict[str, Any]]:
    """The file sources' positions (``{"log": ..., "index": n}``) in ``offsets/<batch>``."""
    try:
        lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()[2:]
    except FileNotFoundError:
        return []
    positions = []
    for line in lines:
        try:
            offset = json.loads(line)
        except ValueError:
            continue  # a source without a JSON offset
        # firesteel's sources log their position wrapped with what they declared.
        if isinstance(offset, dict) and isinstance(offset.get("offset"), dict):
            offset = offset["offset"]
        if isinstance(offset, dict) and "log" in offset and "index" in offset:
            positions.append(offset)
    return positions


def _log_files(topic: Path, log: str) -> list[Path] | None:
    """The topic's files in the order the source whose position names ``log``
    (``<options digest>-<log identity>``) discovered them; None for another topic's log."""
    digest, _, identity = log.partition("-")
    folder = topic / _TOPIC_RECORDS / f"source-{digest}"
    if not (folder / "identity.json").is_file():
        return None
    if read_record(str(folder / "identity.json"), "source-log-identity", (1,)) != identity:
        return None  # the same options read another topic: each log has its own identity
    files: list[Path] = []
    for segment in sorted((folder / "segments").glob("*.json")):
        files.extend(topic / path for path, _, _ in read_record(str(segment), "source-log", (1,)))
    return files


def _topic_files(topic: Path) -> list[Path]:
    """Every published file of a local topic."""
    return [p for p in topic.rglob("*.parquet") if _TOPIC_RECORDS not in p.parts]


def streamlets(work: Path) -> list[str]:
    """The streamlets with a checkpoint folder under ``work``."""
    folder = work / "checkpoints"
    return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def streamlet_progress(
    work: Path, streamlet: str, rows: _FooterRows | None = None
) -> StreamletProgress:
    """``streamlet``'s progress under the pipeline work folder ``work`` (module docs)."""
    rows = rows or _FooterRows()
    shown = StreamletProgress(streamlet)
    topics = sorted(p for p in (work / "topics").glob("*") if p.is_dir())
    consumed: dict[str, list[tuple[int, int]]] = {}
    """Per local topic, each query's (rows read, rows not yet read)."""
    for checkpoint in _checkpoints(work, streamlet):
        shown.queries += 1
        batch, at = _last_commit(checkpoint)
        if batch is not None and (shown.batch is None or batch > shown.batch):
            shown.batch, shown.committed_at = batch, at
        for records in read_history(str(checkpoint), last=1).values():
            if records:
                shown.rows_out += int(records[-1].totals.get("input_rows", 0))
        for source in read_source_progress(str(checkpoint)).values():
            for partition, behind in source.get("lag", {}).items():
                topic = partition.rsplit("[", 1)[0]
                shown.lag[topic] = shown.lag.get(topic, 0) + int(behind)
        if batch is None:
            continue
        for position in _file_positions(checkpoint, batch):
            for topic in topics:
                files = _log_files(topic, str(position["log"]))
                if files is None:
                    continue
                read = files[: int(position["index"])]
                unread = set(_topic_files(topic)) - set(read)
                consumed.setdefault(topic.name, []).append(
                    (sum(rows(p) for p in read), sum(rows(p) for p in unread))
                )
    # Two queries of a streamlet may read one topic: it has read what the slower one has.
    for topic_name, positions in consumed.items():
        slowest = min(positions)
        shown.rows_in = (shown.rows_in or 0) + slowest[0]
        shown.lag[topic_name] = shown.lag.get(topic_name, 0) + slowest[1]
    return shown


def pipeline_progress(work: Path, rows: _FooterRows | None = None) -> list[StreamletProgress]:
    """The progress of every streamlet with a checkpoint under ``work``."""
    rows = rows or _FooterRows()
    return [streamlet_progress(work, name, rows) for name in streamlets(work)]


def progress_line(shown: StreamletProgress, now: float) -> str:
    """``<streamlet>: batch N (S s ago), rows in X, rows out Y, lag topic Z``."""
    if shown.batch is None or shown.committed_at is None:
        where = "no batch committed yet"
    else:
        where = f"batch {shown.batch} ({now - shown.committed_at:.0f} s ago)"
    rows_in = "-" if shown.rows_in is None else f"{shown.rows_in:,}"
    lag = ", ".join(f"{topic} {behind:,}" for topic, behind in sorted(shown.lag.items()))
    return f"{shown.streamlet}: {where}, rows in {rows_in}, rows out {shown.rows_out:,}" + (
        f", lag {lag}" if lag else ""
    )


def as_json(progress: list[StreamletProgress]) -> list[dict[str, Any]]:
    """The progress as plain data."""
    return [asdict(shown) for shown in progress]


def record_topology(verified: VerifiedBlueprint, work: Path) -> None:
    """Write ``<work>/topology.json``: each topic by name, the streamlets writing it
    (``producers``) and reading it (``consumers``), replaced whole."""
    topics = []
    for key, topic in sorted(verified.blueprint.topics.items()):
        ends = {}
        for role, table in (("producers", verified.producers), ("consumers", verified.consumers)):
            ends[role] = sorted({c.streamlet for c in table.get(key, ())})
        topics.append({"topic": topic.name, **ends})
    content = json.dumps({"topics": topics}, indent=1).encode()
    Folder(str(work)).write(TOPOLOGY, content, sync=False)


def topic_flows(work: Path, progress: list[StreamletProgress]) -> list[dict[str, Any]]:
    """Per topic of the recorded topology: ``topic``, ``producers``, and ``consumers`` as
    ``{streamlet: lag}`` (``None`` before the consumer's first commit); empty when the work
    folder has no topology (a pipeline last run before it was recorded)."""
    try:
        recorded = json.loads((work / TOPOLOGY).read_text())
    except FileNotFoundError:
        return []
    by_name = {shown.streamlet: shown for shown in progress}
    flows = []
    for topic in recorded["topics"]:
        consumers = {}
        for streamlet in topic["consumers"]:
            shown = by_name.get(streamlet)
            consumers[streamlet] = None if shown is None else shown.lag.get(topic["topic"])
        flows.append({**topic, "consumers": consumers})
    return flows


class ProgressPrinter:
    """Prints every streamlet's :func:`progress_line` every ``every_s`` seconds from a
    daemon thread, until :meth:`stop`; a failed read is printed, never raised."""

    def __init__(self, work: Path, every_s: float, out: TextIO) -> None:
        self.work = work
        self.every_s = every_s
        self.out = out
        self._stopped = threading.Event()
        self._rows = _FooterRows()
        self._thread = threading.Thread(target=self._run, name="firesteel-progress", daemon=True)

    def start(self) -> ProgressPrinter:
        """Start printing."""
        self._thread.start()
        return self

    def _run(self) -> None:
        import time

        while not self._stopped.wait(self.every_s):
            try:
                now = time.time()
                shown = pipeline_progress(self.work, self._rows)
                text = "; ".join(progress_line(s, now) for s in shown) or "no streamlet yet"
            except (OSError, ValueError) as exc:
                text = f"not readable now ({exc})"
            self.out.write(f"progress: {text}\n")
            self.out.flush()

    def stop(self) -> None:
        """Stop printing (waits for a print under way)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()
