"""The soak command: many SIGKILL/restart cycles on one pipeline, beyond what CI runs.

Usage::

    python -m firesteel.testing.soak PATH --cycles N [--minutes M] [--workdir DIR] [--seed S]

``PATH`` is one of :data:`PATHS`:

- ``files``: firesteel.files -> map -> firesteel.files (two-phase commit);
- ``state``: firesteel.files -> keyed state with timers -> firesteel.files, with
  a random operator parallelism (1-4) on every restart;
- ``wal``: firesteel.files -> a write-ahead-log sink into an upsert target
  (SQLite), with a random partition count (1-4) on every restart.

Every cycle adds input files and starts the job from its checkpoint armed
with one kill (a named protocol point of the path, or a random moment, in one
of the two batches after the last commit: :func:`arm`); the next cycle's start
recovers that crash with more input waiting. After the last cycle the job
runs unarmed until it has processed everything. Every start spells the
checkpoint (and state) folder differently from the one before: plain, with a
trailing slash, as a ``file://`` URI, through a symlink
(:class:`~firesteel.testing.spellings.Spellings`). After the last cycle the
output is read by a reader that is not firesteel's (pyarrow's dataset reader
skipping ``_``-folders, or ``sqlite3``) and the command prints one JSON line::

    {"path": "files", "cycles": 500, "kills": 498, "lost": 0, "duplicated": 0, ...}

and exits 1 if anything was lost, duplicated or (``state``) ranked wrongly.
The Kafka pipelines are soak paths of the Kafka distribution
(``python -m firesteel.kafka.testing.soak``), built on :func:`soak` and
:func:`run_cli` with their own :class:`SoakRun`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import random
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from firesteel.testing.counting import count_sequence
from firesteel.testing.harness import (
    CrashHarness,
    Kill,
    at_point,
    at_random,
    batch_started,
    next_batch,
)
from firesteel.testing.scripts import script
from firesteel.testing.spellings import Spellings

logger = logging.getLogger(__name__)

FILES_PER_CYCLE = 4
ROWS_PER_FILE = 50
FILES_PER_BATCH = "2"
KEYS = 7


@dataclass(frozen=True)
class SoakPath:
    """One pipeline the soak command can run."""

    job: str
    points: tuple[str, ...]
    """Protocol points a cycle may kill at (besides random moments)."""
    rescales: bool
    """Whether restarts draw a new parallelism."""


PATHS = {
    "files": SoakPath(
        "files_job",
        ("sink.after_write", "driver.before_commit", "driver.mid_commit", "driver.after_commit"),
        rescales=False,
    ),
    "state": SoakPath(
        "state_job",
        ("state.after_snapshot", "driver.before_commit", "driver.mid_commit"),
        rescales=True,
    ),
    "wal": SoakPath(
        "wal_job", ("wal.after_send", "driver.mid_commit", "driver.after_commit"), rescales=True
    ),
}


class SoakRun(Protocol):
    """One pipeline under soak: its job, input, restarts, kills and the final count."""

    @property
    def job(self) -> Path:
        """The job script the harness runs."""
        ...

    def feed(self) -> None:
        """Add one cycle's input."""

    def args(self, run: int) -> list[str]:
        """The job's arguments for restart ``run``."""
        ...

    @property
    def points(self) -> tuple[str, ...]:
        """Protocol points a cycle may kill at (besides random moments)."""
        ...

    @property
    def checkpoint(self) -> Path:
        """The checkpoint folder (plainly spelled), to arm kills at a batch still to come."""
        ...

    def check(self) -> dict[str, int]:
        """``records`` and counts of wrong records: ``lost``, ``duplicated``, ``unexpected``
        and path-specific ones (any non-zero one fails the soak)."""
        ...


def counts(seqs: Iterable[int], expected: range, **extra: int) -> dict[str, int]:
    """The figures :meth:`SoakRun.check` reports, from the sequence numbers read back."""
    count = count_sequence(list(seqs), expected)
    return {
        "records": len(expected),
        "lost": len(count.lost),
        "duplicated": sum(times - 1 for times in count.duplicated.values()),
        "unexpected": len(count.unexpected),
        **extra,
    }


def misranked(pairs_by_key: dict[str, list[tuple[int, int]]]) -> int:
    """Records whose rank is not their position among their key's records (seq, rank) pairs."""
    wrong = 0
    for pairs in pairs_by_key.values():
        pairs.sort()
        wrong += sum(1 for index, (_, rank) in enumerate(pairs) if rank != index + 1)
    return wrong


def _key(seq: int) -> str:
    return f"k{(seq * 5) % KEYS}"


class Soak:
    """The folders, input and checks of one soak run of a files-fed path (:data:`PATHS`)."""

    def __init__(self, name: str, workdir: Path, rng: random.Random) -> None:
        self.name = name
        self.path = PATHS[name]
        self.rng = rng
        self.source = workdir / "in"
        self.out = workdir / ("target.sqlite" if name == "wal" else "out")
        self.checkpoint = workdir / "ck"
        self.state = workdir / "state"
        self.checkpoints = Spellings(self.checkpoint)
        self.states = Spellings(self.state)
        self.files = 0
        self.source.mkdir(parents=True)

    @property
    def job(self) -> Path:
        return script(self.path.job)

    def feed(self) -> None:
        """Add one cycle's input files (seq, text, key), named so they sort in order."""
        for _ in range(FILES_PER_CYCLE):
            start = self.files * ROWS_PER_FILE
            seqs = list(range(start, start + ROWS_PER_FILE))
            table = pa.table(
                {
                    "seq": pa.array(seqs, pa.int64()),
                    "text": [f"r{s}" for s in seqs],
                    "key": [_key(s) for s in seqs],
                }
            )
            pq.write_table(table, self.source / f"part-{self.files:07d}.parquet")
            self.files += 1

    def args(self, run: int) -> list[str]:
        """The job's arguments for restart ``run``: the checkpoint (and state folder) spelled
        otherwise than in the previous start, and a new parallelism where the path allows."""
        parallelism = str(self.rng.randint(1, 4)) if self.path.rescales else "2"
        checkpoint = self.checkpoints.next()
        if self.name == "files":
            return [str(self.source), str(self.out), checkpoint, FILES_PER_BATCH]
        if self.name == "state":
            return [
                str(self.source),
                str(self.out),
                checkpoint,
                self.states.next(),
                FILES_PER_BATCH,
                parallelism,
            ]
        return [
            str(self.source),
            str(self.out),
            checkpoint,
            FILES_PER_BATCH,
            "upsert",
            "exactly-once",
            parallelism,
        ]

    @property
    def points(self) -> tuple[str, ...]:
        return self.path.points

    def check(self) -> dict[str, int]:
        """Lost, duplicated (and for ``state`` wrongly ranked) records, read without firesteel."""
        expected = range(self.files * ROWS_PER_FILE)
        wrong = 0
        if self.name == "wal":
            with sqlite3.connect(self.out) as db:
                seqs = [row[0] for row in db.execute("SELECT seq FROM records")]
        else:
            table = ds.dataset(self.out, format="parquet").to_table()
            if self.name == "state":
                table = table.filter(pc.greater_equal(table.column("seq"), 0))
                by_key: dict[str, list[tuple[int, int]]] = {}
                for row in table.select(["seq", "key", "rank"]).to_pylist():
                    by_key.setdefault(row["key"], []).append((row["seq"], row["rank"]))
                wrong = misranked(by_key)
            seqs = table.column("seq").to_pylist()
        return counts(seqs, expected, misranked=wrong)


def arm(run: SoakRun, rng: random.Random) -> Kill:
    """One cycle's kill: a named point or a random moment (equal odds), in one of the two
    batches after the checkpoint's last commit, the first of which may be a crashed batch's
    re-run."""
    batch = next_batch(run.checkpoint) + rng.randrange(2)
    if rng.random() < 0.5:
        return at_point(rng.choice(run.points), batch=batch)
    return at_random((0.0, 3.0), when=batch_started(run.checkpoint, batch))


def soak(
    name: str,
    run: SoakRun,
    cycles: int,
    workdir: Path,
    rng: random.Random,
    *,
    minutes: float | None = None,
) -> dict[str, object]:
    """Run ``cycles`` kill/restart cycles of ``run`` in ``workdir``; the counts.

    ``minutes`` stops starting new cycles once that much time has passed (the
    report gives the cycles actually run).

    A cycle is one start: it feeds input and runs the job armed with a kill
    (:func:`arm`). The next cycle's start recovers the crash, with more input
    waiting; a run the kill misses simply completes. After the last cycle the
    job runs unarmed until it has processed everything.
    """
    kills = done = 0
    started = time.monotonic()
    deadline = started + minutes * 60 if minutes is not None else float("inf")
    with CrashHarness(workdir / "harness", seed=rng.randrange(1 << 30)) as harness:
        for cycle in range(cycles):
            if time.monotonic() > deadline:
                break
            done += 1
            run.feed()
            record = harness.attempt(run.job, run.args(cycle), arm(run, rng))
            kills += record.killed
            logger.info("soak %s: cycle %d/%d, %d kills", name, cycle + 1, cycles, kills)
        harness.run(run.job, run.args)
    return {
        "path": name,
        "cycles": done,
        "kills": kills,
        **run.check(),
        "seconds": round(time.monotonic() - started, 1),
    }


RunFactory = Callable[[str, Path, random.Random], AbstractContextManager[SoakRun]]
"""Builds path ``name``'s run in a work folder; a context manager so it may own services."""


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _terminate_like_interrupt() -> Iterator[None]:
    """SIGTERM raises SystemExit while the soak runs, so ``finally`` blocks stop what it
    started; the previous handler is back afterwards (tests call :func:`run_cli` in-process).
    Only the main thread may set handlers: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_cli(
    prog: str, paths: Sequence[str], factory: RunFactory, argv: Sequence[str] | None
) -> int:
    """The soak command line over ``paths`` (see the module docs); the exit code.

    ``kill <pid>`` (SIGTERM) stops it as Ctrl-C does: the job, broker, CQL
    server or cluster it started are stopped on the way out.
    """
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("path", choices=sorted(paths))
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--workdir", type=Path, help="kept afterwards (default: a temp folder)")
    parser.add_argument("--seed", type=int)
    parser.add_argument(
        "--minutes", type=float, help="start no cycle after this long (the report counts the run)"
    )
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    rng = random.Random(options.seed)
    with (
        _terminate_like_interrupt(),
        tempfile.TemporaryDirectory(prefix="firesteel-soak-") as scratch,
    ):
        workdir = options.workdir or Path(scratch)
        with factory(options.path, workdir, rng) as run:
            report = soak(options.path, run, options.cycles, workdir, rng, minutes=options.minutes)
    sys.stdout.write(json.dumps(report) + "\n")
    # Every count check() reports is a count of wrong records, except the total.
    failures = report.keys() - {"path", "cycles", "kills", "records", "seconds"}
    failed = any(report[k] for k in failures)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m firesteel.testing.soak`` (see the module docs)."""

    def factory(name: str, workdir: Path, rng: random.Random) -> AbstractContextManager[SoakRun]:
        return nullcontext(Soak(name, workdir, rng))

    return run_cli("python -m firesteel.testing.soak", list(PATHS), factory, argv)


if __name__ == "__main__":
    sys.exit(main())
