"""The soak command: many SIGKILL/restart cycles on one pipeline, beyond what CI runs.

Usage::

    python -m firesteel.testing.soak PATH --cycles N [--minutes M [--pause]] [--workdir DIR]
                                     [--seed S]
    python -m firesteel.testing.soak PATH --resume --workdir DIR [--cycles N]
                                     [--minutes M [--pause]]

``PATH`` is one of :data:`PATHS`:

- ``files``: firesteel.files -> map -> firesteel.files (two-phase commit);
- ``state``: firesteel.files -> keyed state with timers -> firesteel.files, with
  a random operator parallelism (1-4) on every restart;
- ``wal``: firesteel.files -> a write-ahead-log sink into an upsert target
  (SQLite), with a random partition count (1-4) on every restart;
- ``windows``: firesteel.files -> session windows with late data -> firesteel.files,
  with a random operator parallelism and input ``repartition`` on every restart, checked
  against a plain-Python reference (:class:`WindowsSoak`);
- ``windows-per-key``: the same with an aggregate without Arrow form, so the session
  windows run per key (map state and event-time timers) rather than on columns
  (:class:`PerKeyWindowsSoak`);
- ``windows-combined``: the same input -> tumbling windows dropping late records, each
  input task combining its records per key and window before the shuffle
  (:class:`CombinedWindowsSoak`);
- ``join``: two firesteel.files inputs -> the interval join -> firesteel.files, with a
  random operator parallelism on every restart, checked against the pairs the interval
  holds, joined in plain Python (:class:`JoinSoak`);
- ``files-s3``, ``state-s3``, ``wal-s3``: the same paths with the file sink's
  output, the keyed state, or the write-ahead log on an S3 API server process
  (moto, started by the soak in ``WORKDIR/s3`` and stopped with it), spelled
  ``s3a://`` and ``s3://`` on alternate restarts and reached through the
  session's ``spark.hadoop.fs.s3a.*``; every fifth cycle restarts the server
  (objects kept) while no job runs. The server keeps its objects in memory, so
  these runs cannot be paused and resumed.

Every cycle adds input files and starts the job from its checkpoint armed
with one kill (a named protocol point of the path, or a random moment, in one
of the two batches after the last commit: :func:`arm`); the next cycle's start
recovers that crash with more input waiting. After the last cycle the job
runs unarmed until it has processed everything. Every start spells the
checkpoint (and state) folder differently from the one before: plain, with a
trailing slash, as a ``file://`` URI, through a symlink
(:class:`~firesteel.testing.checkpoint_spellings.Spellings`). After the last cycle the
output is read by a reader that is not firesteel's (pyarrow's dataset reader
skipping ``_``-folders, or ``sqlite3``) and the command prints one JSON line::

    {"path": "files", "cycles": 500, "kills": 498, "lost": 0, "duplicated": 0, ...}

and exits 1 if anything was lost, duplicated or (``state``) ranked wrongly.

A run longer than one sitting can be paused and resumed: with ``--pause``,
a ``--minutes`` limit that ends the sitting before the last cycle leaves the
run where it stands (the job stopped after its cycle, as a kill leaves it)
and exits :data:`PAUSED`; ``--resume --workdir DIR`` goes on with it. The
progress is saved in ``DIR/soak.json`` (:class:`Progress`) after every
cycle, so a soak command killed itself resumes from its last saved cycle
too, the killed job being one more crash to recover, unless it died while
writing a cycle's input (then resuming is refused: that input is partial).
The report's ``legs`` counts the sittings and ``seconds`` adds them up.

The Kafka pipelines are soak paths of the Kafka distribution
(``python -m firesteel.testing.kafka.soak``), built on :func:`soak` and
:func:`run_cli` with their own :class:`SoakRun`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from firesteel.testing.checkpoint_spellings import Spellings
from firesteel.testing.counting import count_sequence
from firesteel.testing.harness import (
    CrashHarness,
    Kill,
    at_point,
    at_random,
    batch_started,
    next_batch,
)
from firesteel.testing.joins import check_join_output, write_join_files
from firesteel.testing.ranked import misranked, ranks_by_key
from firesteel.testing.s3 import SETTINGS_ENV, S3Server
from firesteel.testing.scripts import script
from firesteel.testing.scripts.wal_target import read_writes, resends
from firesteel.testing.windows import ROWS_PER_FILE as WINDOW_ROWS_PER_FILE
from firesteel.testing.windows import check_window_output, write_window_files

logger = logging.getLogger(__name__)

FILES_PER_CYCLE = 4
ROWS_PER_FILE = 50
FILES_PER_BATCH = "2"
KEYS = 7

PROGRESS = "soak.json"
"""The file in a soak's work folder holding its :class:`Progress`."""
PAUSED = 3
"""Exit code of a sitting that ``--pause`` ended before the last cycle."""


class SoakError(Exception):
    """A soak cannot start or resume as asked; the message says why and what to do."""


S3_RESTART_EVERY = 5
"""An S3 path's server is restarted (objects kept) before every fifth cycle's job."""


@dataclass(frozen=True)
class SoakPath:
    """One pipeline the soak command can run."""

    job: str
    points: tuple[str, ...]
    """Protocol points a cycle may kill at (besides random moments)."""
    rescales: bool
    """Whether restarts draw a new parallelism."""


LOCAL_PATHS = {
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
S3_SUFFIX = "-s3"
WINDOWS = "windows"
"""The event-time path: session windows with late data (:class:`WindowsSoak`)."""
PER_KEY_WINDOWS = "windows-per-key"
"""The event-time path with its sessions kept per key (:class:`PerKeyWindowsSoak`)."""
COMBINED_WINDOWS = "windows-combined"
"""The event-time path combined before the shuffle (:class:`CombinedWindowsSoak`)."""
JOIN = "join"
"""The two-input event-time path: the interval join (:class:`JoinSoak`)."""
PATHS = {
    **LOCAL_PATHS,
    **{name + S3_SUFFIX: path for name, path in LOCAL_PATHS.items()},
    WINDOWS: SoakPath(
        "windows_job",
        ("state.after_snapshot", "sink.after_write", "driver.before_commit", "driver.mid_commit"),
        rescales=True,
    ),
    PER_KEY_WINDOWS: SoakPath(
        "windows_job",
        ("state.after_snapshot", "sink.after_write", "driver.before_commit", "driver.mid_commit"),
        rescales=True,
    ),
    COMBINED_WINDOWS: SoakPath(
        "windows_job",
        ("state.after_snapshot", "sink.after_write", "driver.before_commit", "driver.mid_commit"),
        rescales=True,
    ),
    JOIN: SoakPath(
        "join_job",
        ("state.after_snapshot", "sink.after_write", "driver.before_commit", "driver.mid_commit"),
        rescales=True,
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

    def saved(self) -> dict[str, Any]:
        """What a resumed run needs to go on (input so far, topics or tables, spellings), as
        JSON; the run's factory gets it back."""
        ...


class SavedRun(dict[str, Any]):
    """A paused run's :meth:`SoakRun.saved`, read back from ``source``: a key it lacks is a
    :class:`SoakError` naming the file, not a ``KeyError`` from deep in a factory."""

    def __init__(self, saved: Mapping[str, Any], source: Path) -> None:
        super().__init__(saved)
        self.source = source

    def __missing__(self, key: str) -> Any:
        raise self._unusable(key, "has no")

    def number(self, key: str) -> int:
        """The whole number saved under ``key``."""
        value = self[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._unusable(key, f"has {value!r}, not a whole number, as")
        return value

    def name(self, key: str) -> str:
        """The text (a topic, a table) saved under ``key``."""
        value = self[key]
        if not isinstance(value, str) or not value:
            raise self._unusable(key, f"has {value!r}, not a name, as")
        return value

    def _unusable(self, key: str, what: str) -> SoakError:
        return SoakError(
            f"{self.source} {what} {key!r} in its run section (another firesteel version "
            "wrote it, or it was edited); start a new soak elsewhere"
        )


def resumed_spellings(saved: SavedRun | None, **spellings: Spellings) -> None:
    """Set each of ``spellings`` to the starts ``saved`` recorded under its name, so the
    first start of a resumed run spells its folder otherwise than the last one before."""
    if saved is None:
        return
    for name, spelling in spellings.items():
        spelling.starts = saved.number(f"{name}_starts")


@dataclass
class Progress:
    """Where a soak run stands: saved in its work folder (:data:`PROGRESS`) after every cycle."""

    path: str
    cycles: int
    """Cycles the run is to make in all."""
    done: int = 0
    kills: int = 0
    seconds: float = 0.0
    legs: int = 0
    """Sittings so far (``--resume`` starts another)."""
    feeding: bool = False
    """Set while a cycle writes its input: a run that died then cannot be resumed."""
    finished: bool = False
    rng: list[Any] = field(default_factory=list)
    """The soak's random state (:meth:`random.Random.getstate`)."""
    run: dict[str, Any] = field(default_factory=dict)
    """:meth:`SoakRun.saved`."""

    def save(self, workdir: Path) -> None:
        """Write it to ``workdir`` atomically: a kill leaves the old or the new file."""
        target = workdir / PROGRESS
        partial = target.with_suffix(".partial")
        partial.write_text(json.dumps(asdict(self)))
        os.replace(partial, target)

    @classmethod
    def load(cls, workdir: Path, path: str) -> Progress:
        """The paused run of ``path`` in ``workdir``; :class:`SoakError` if it cannot go on."""
        target = workdir / PROGRESS
        if not target.is_file():
            msg = f"{target} does not exist: --resume needs the --workdir of a paused soak"
            raise SoakError(msg)
        try:
            progress = cls(**json.loads(target.read_text()))
        except (ValueError, TypeError) as exc:
            msg = f"{target} is not a soak's progress ({exc}); start a new soak elsewhere"
            raise SoakError(msg) from exc
        problem = (
            f"it is a soak of path {progress.path!r}, not {path!r}"
            if progress.path != path
            else "that run has finished and reported"
            if progress.finished
            else f"it died while writing the input of cycle {progress.done + 1}, which is partial"
            if progress.feeding
            else ""
        )
        if problem:
            msg = f"cannot resume the soak in {workdir}: {problem}; start a new soak elsewhere"
            raise SoakError(msg)
        return progress


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


def _key(seq: int) -> str:
    return f"k{(seq * 5) % KEYS}"


class Soak:
    """The folders, input and checks of one soak run of a files-fed path (:data:`PATHS`)."""

    def __init__(
        self,
        name: str,
        workdir: Path,
        rng: random.Random,
        saved: SavedRun | None = None,
        s3: S3Server | None = None,
    ) -> None:
        self.name = name.removesuffix(S3_SUFFIX)
        self.path = PATHS[name]
        self.rng = rng
        self.source = workdir / "in"
        self.out = workdir / ("target.sqlite" if self.name == "wal" else "out")
        self.s3 = s3
        self.bucket = s3.create_bucket("soak") if s3 else ""
        self.s3_out = f"s3a://{self.bucket}/out"
        self.checkpoint = workdir / "ck"
        self.state = workdir / "state"
        self.checkpoints = Spellings(self.checkpoint)
        self.states = Spellings(self.state)
        resumed_spellings(saved, checkpoint=self.checkpoints, state=self.states)
        self.files = saved.number("files") if saved else 0
        self.source.mkdir(parents=True, exist_ok=saved is not None)

    @property
    def job(self) -> Path:
        return script(self.path.job)

    def saved(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "checkpoint_starts": self.checkpoints.starts,
            "state_starts": self.states.starts,
        }

    def feed(self) -> None:
        """Add one cycle's input files (seq, text, key), named so they sort in order; on S3,
        restart the server every :data:`S3_RESTART_EVERY` cycles (no job runs now)."""
        cycle = self.files // FILES_PER_CYCLE
        if self.s3 is not None and cycle % S3_RESTART_EVERY == S3_RESTART_EVERY - 1:
            self.s3.restart()
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
        start = self.checkpoints.starts
        checkpoint = self.checkpoints.next()
        if self.name == "files":
            out = self.s3_out if self.s3 else str(self.out)
            return [str(self.source), out, checkpoint, FILES_PER_BATCH]
        if self.name == "state":
            state = self.states.next()
            return [
                str(self.source),
                str(self.out),
                checkpoint,
                S3Server.spellings(self.bucket, "state")(start) if self.s3 else state,
                FILES_PER_BATCH,
                parallelism,
            ]
        location = [S3Server.spellings(self.bucket, "wal")(start)] if self.s3 else []
        return [
            str(self.source),
            str(self.out),
            checkpoint,
            FILES_PER_BATCH,
            "upsert",
            "exactly-once",
            parallelism,
            *location,
        ]

    @property
    def points(self) -> tuple[str, ...]:
        return self.path.points

    def check(self) -> dict[str, int]:
        """Lost, duplicated (and for ``state`` wrongly ranked) records, read without firesteel;
        for ``wal``, re-sends its contract forbids (:meth:`Resends.beyond
        <firesteel.testing.scripts.wal_target.Resends.beyond>`), each start but the last
        allowed one death, from the target's log of writes: the upserts absorb a re-send."""
        expected = range(self.files * ROWS_PER_FILE)
        if self.name == "wal":
            with sqlite3.connect(self.out) as db:
                seqs = [row[0] for row in db.execute("SELECT seq FROM records")]
            crashes = self.checkpoints.starts - 1
            beyond = resends(read_writes(str(self.out))).beyond(crashes)
            return counts(seqs, expected, resent_beyond_contract=beyond)
        table, wrong = self._output(), 0
        if self.name == "state":
            table = table.filter(pc.greater_equal(table.column("seq"), 0))
            wrong = misranked(ranks_by_key(table))
        return counts(table.column("seq").to_pylist(), expected, misranked=wrong)

    def _output(self) -> pa.Table:
        """The Parquet output, read with pyarrow (``_``-folders skipped), from S3 with
        pyarrow's own S3 filesystem."""
        if self.name != "files" or self.s3 is None:
            return ds.dataset(self.out, format="parquet").to_table()
        filesystem = self.s3.filesystem()
        return ds.dataset(f"{self.bucket}/out", format="parquet", filesystem=filesystem).to_table()


class _EventTimeSoak:
    """What the event-time paths share: inputs, output, checkpoint and state folders under
    ``workdir`` (each restart spelling the checkpoint and state location anew), the files
    written so far, and the path's job and points (:attr:`path`)."""

    path: str

    def __init__(self, workdir: Path, rng: random.Random, saved: SavedRun | None = None) -> None:
        self.rng = rng
        self.source = workdir / "in"
        self.out = workdir / "out"
        self.checkpoint = workdir / "ck"
        self.checkpoints = Spellings(self.checkpoint)
        self.states = Spellings(workdir / "state")
        resumed_spellings(saved, checkpoint=self.checkpoints, state=self.states)
        self.files = saved.number("files") if saved else 0

    @property
    def job(self) -> Path:
        return script(PATHS[self.path].job)

    @property
    def points(self) -> tuple[str, ...]:
        return PATHS[self.path].points

    def saved(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "checkpoint_starts": self.checkpoints.starts,
            "state_starts": self.states.starts,
        }

    def args(self, run: int) -> list[str]:
        """The job's arguments: inputs, output, checkpoint and state (spelled anew), files
        per batch and a random operator parallelism (1-4)."""
        return [
            str(self.source),
            str(self.out),
            self.checkpoints.next(),
            self.states.next(),
            FILES_PER_BATCH,
            str(self.rng.randint(1, 4)),
        ]


class WindowsSoak(_EventTimeSoak):
    """The ``windows`` path: firesteel.files -> session windows with late data (allowed
    lateness, side output) -> firesteel.files, every restart at a random operator
    parallelism (1-4) and input ``repartition`` (none, 1-3). Each cycle adds
    :data:`FILES_PER_CYCLE` files of out-of-order ``(seq, key, ts)`` records, read two to a
    batch, so the batches are known and :func:`~firesteel.testing.windows.check_window_output`
    compares the output with the plain-Python reference fed the same batches: every window
    result and late record exactly once, re-emitted only for allowed-lateness updates."""

    path = WINDOWS
    operator = "sessions"
    """The job's window operator (``windows_job.py``'s last argument)."""

    def feed(self) -> None:
        write_window_files(self.source, self.files, FILES_PER_CYCLE)
        self.files += FILES_PER_CYCLE

    def args(self, run: int) -> list[str]:
        return [*super().args(run), str(self.rng.randint(0, 3)), self.operator]

    def check(self) -> dict[str, int]:
        found = check_window_output(
            self.out, self.files, int(FILES_PER_BATCH), operator=self.operator
        )
        return {
            "records": self.files * WINDOW_ROWS_PER_FILE,
            "lost": found["missing"],
            "duplicated": found["duplicated"],
            "unexpected": found["unexpected"],
        }


class PerKeyWindowsSoak(WindowsSoak):
    """The ``windows-per-key`` path: the ``windows`` path with an aggregate without Arrow
    form, so its session windows are kept per key (map state and event-time timers)."""

    path = PER_KEY_WINDOWS
    operator = "sessions-per-key"


class CombinedWindowsSoak(WindowsSoak):
    """The ``windows-combined`` path: the ``windows`` path's input and restarts -> tumbling
    windows with ``late="drop"``, each input task combining its records per key and window
    before the shuffle (:func:`~firesteel.testing.windows.tumbling_counts`): every window
    result exactly once, re-emitted only for allowed-lateness updates, no late record."""

    path = COMBINED_WINDOWS
    operator = "tumbling"


class JoinSoak(_EventTimeSoak):
    """The ``join`` path: two firesteel.files inputs -> the interval join -> firesteel.files,
    every restart at a random operator parallelism (1-4). Each cycle adds
    :data:`FILES_PER_CYCLE` files of ``(seq, key, ts)`` records to each input, read two of
    each to a batch; :func:`~firesteel.testing.joins.check_join_output` compares the output
    with every pair the interval holds, joined in plain Python: each exactly once."""

    path = JOIN

    def feed(self) -> None:
        write_join_files(self.source, self.files, FILES_PER_CYCLE)
        self.files += FILES_PER_CYCLE

    def check(self) -> dict[str, int]:
        """``records`` counts the pairs the output must hold (the reference's)."""
        found = check_join_output(self.out, self.files)
        return {
            "records": found["pairs"],
            "lost": found["missing"],
            "duplicated": found["duplicated"],
            "unexpected": found["unexpected"] + found["late"],
        }


@contextlib.contextmanager
def on_s3(name: str, workdir: Path, rng: random.Random) -> Iterator[Soak]:
    """Path ``name`` (an ``-s3`` one) with its S3 server started in ``workdir/s3`` and its
    settings in the environment the jobs inherit (:data:`SETTINGS_ENV`); both undone after."""
    server = S3Server(workdir / "s3").start()
    previous = os.environ.get(SETTINGS_ENV)
    os.environ[SETTINGS_ENV] = json.dumps(server.settings())
    try:
        yield Soak(name, workdir, rng, s3=server)
    finally:
        if previous is None:
            os.environ.pop(SETTINGS_ENV, None)
        else:
            os.environ[SETTINGS_ENV] = previous
        server.stop()


COMMIT_WINDOW = "driver."
"""Points of the driver's commit (``driver.before_commit``, ``driver.mid_commit`` between
its durable writes, ``driver.after_commit``): the window a random moment rarely hits."""


def arm(run: SoakRun, rng: random.Random) -> Kill:
    """One cycle's kill, in one of the two batches after the checkpoint's last commit (the
    first of which may be a crashed batch's re-run): half the time a named point of the
    path; else, with equal odds, a point inside the driver's commit (:data:`COMMIT_WINDOW`;
    a random moment lands there rarely, its writes taking milliseconds of a batch's seconds)
    or a random moment. (The named half draws as it always did, so a seed keeps its kill.)"""
    batch = next_batch(run.checkpoint) + rng.randrange(2)
    if rng.random() < 0.5:
        return at_point(rng.choice(run.points), batch=batch)
    commit = [point for point in run.points if point.startswith(COMMIT_WINDOW)]
    if commit and rng.random() < 0.5:
        return at_point(rng.choice(commit), batch=batch)
    return at_random((0.0, 3.0), when=batch_started(run.checkpoint, batch))


def soak(
    run: SoakRun,
    progress: Progress,
    workdir: Path,
    rng: random.Random,
    *,
    minutes: float | None = None,
    pause: bool = False,
) -> dict[str, object]:
    """One sitting of the kill/restart cycles of ``run`` in ``workdir``, from ``progress``;
    the report (the counts, or ``paused``).

    ``minutes`` stops starting new cycles once that much time has passed, after
    at least one (the report gives the cycles actually run); with ``pause`` the run then stops
    where it stands, its progress saved for a later sitting, instead of
    finishing.

    A cycle is one start: it feeds input and runs the job armed with a kill
    (:func:`arm`). The next cycle's start recovers the crash, with more input
    waiting; a run the kill misses simply completes. After the last cycle the
    job runs unarmed until it has processed everything.
    """
    name, leg = progress.path, progress.legs
    progress.legs += 1
    started, before = time.monotonic(), progress.seconds
    deadline = started + minutes * 60 if minutes is not None else float("inf")

    def save() -> None:
        progress.seconds = round(before + time.monotonic() - started, 1)
        progress.rng = list(rng.getstate())
        progress.run = run.saved()
        progress.save(workdir)

    # Fault markers fire once per folder, so every sitting gets its own harness folder.
    folder = workdir / ("harness" if leg == 0 else f"harness-{leg}")
    with CrashHarness(folder, seed=rng.randrange(1 << 30)) as harness:
        save()
        first = progress.done
        while progress.done < progress.cycles and (
            progress.done == first or time.monotonic() <= deadline
        ):
            progress.feeding = True
            save()
            run.feed()
            progress.feeding = False
            progress.done += 1
            save()
            record = harness.attempt(run.job, run.args(progress.done - 1), arm(run, rng))
            progress.kills += record.killed
            save()
            logger.info(
                "soak %s: cycle %d/%d, %d kills",
                name,
                progress.done,
                progress.cycles,
                progress.kills,
            )
        if pause and progress.done < progress.cycles:
            logger.info("soak %s: paused; resume with --resume --workdir %s", name, workdir)
            return {
                "path": name,
                "paused": True,
                "cycles": progress.done,
                "of": progress.cycles,
                "kills": progress.kills,
                "legs": progress.legs,
                "seconds": progress.seconds,
            }
        harness.run(run.job, run.args)
    report = {"path": name, "cycles": progress.done, "kills": progress.kills, **run.check()}
    progress.finished = True
    save()
    return {**report, "legs": progress.legs, "seconds": progress.seconds}


RunFactory = Callable[[str, Path, random.Random, SavedRun | None], AbstractContextManager[SoakRun]]
"""Builds path ``name``'s run in a work folder, new or from what :meth:`SoakRun.saved` gave
(a resumed run); a context manager so it may own services."""


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
    parser.add_argument(
        "--cycles", type=int, help="cycles in all (default 20; on --resume, the paused run's)"
    )
    parser.add_argument("--workdir", type=Path, help="kept afterwards (default: a temp folder)")
    parser.add_argument("--seed", type=int)
    parser.add_argument(
        "--minutes",
        type=float,
        help="start no cycle after this long, but at least one (the report counts the run)",
    )
    parser.add_argument(
        "--pause",
        action="store_true",
        help="when --minutes ends the sitting before the last cycle, keep the run for --resume",
    )
    parser.add_argument(
        "--resume", action="store_true", help="go on with the paused run in --workdir"
    )
    options = parser.parse_args(argv)
    if options.resume and options.workdir is None:
        parser.error("--resume needs the --workdir of the paused soak")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    rng = random.Random(options.seed)
    with (
        _terminate_like_interrupt(),
        tempfile.TemporaryDirectory(prefix="firesteel-soak-") as scratch,
    ):
        workdir = options.workdir or Path(scratch)
        try:
            progress = _progress(options, workdir, rng)
            saved = SavedRun(progress.run, workdir / PROGRESS) if progress.run else None
            with factory(options.path, workdir, rng, saved) as run:
                report = soak(
                    run, progress, workdir, rng, minutes=options.minutes, pause=options.pause
                )
        except SoakError as exc:
            parser.error(str(exc))
    sys.stdout.write(json.dumps(report) + "\n")
    if report.get("paused"):
        return PAUSED
    # Every count check() reports is a count of wrong records, except the total.
    failures = report.keys() - {"path", "cycles", "kills", "records", "legs", "seconds"}
    failed = any(report[k] for k in failures)
    return 1 if failed else 0


def _progress(options: argparse.Namespace, workdir: Path, rng: random.Random) -> Progress:
    """The run to go on with (``--resume``, its random state restored into ``rng``) or a new
    one, in a folder holding no other."""
    if options.resume:
        progress = Progress.load(workdir, options.path)
        try:
            rng.setstate((progress.rng[0], tuple(progress.rng[1]), progress.rng[2]))
        except (IndexError, TypeError, ValueError) as exc:
            msg = f"{workdir / PROGRESS} holds no random state to go on with ({exc})"
            raise SoakError(msg) from exc
        if options.cycles is not None:
            progress.cycles = options.cycles
        return progress
    if (workdir / PROGRESS).exists():
        msg = f"{workdir} holds a soak already ({PROGRESS}): pass --resume or another --workdir"
        raise SoakError(msg)
    return Progress(options.path, 20 if options.cycles is None else options.cycles)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m firesteel.testing.soak`` (see the module docs)."""

    def factory(
        name: str, workdir: Path, rng: random.Random, saved: SavedRun | None
    ) -> AbstractContextManager[SoakRun]:
        if name == WINDOWS:
            return nullcontext(WindowsSoak(workdir, rng, saved))
        if name == PER_KEY_WINDOWS:
            return nullcontext(PerKeyWindowsSoak(workdir, rng, saved))
        if name == COMBINED_WINDOWS:
            return nullcontext(CombinedWindowsSoak(workdir, rng, saved))
        if name == JOIN:
            return nullcontext(JoinSoak(workdir, rng, saved))
        if not name.endswith(S3_SUFFIX):
            return nullcontext(Soak(name, workdir, rng, saved))
        if saved is not None:
            msg = (
                f"a {name} soak cannot be resumed: its S3 test server kept the objects in "
                "memory and stopped with the paused sitting; start a new soak elsewhere"
            )
            raise SoakError(msg)
        return on_s3(name, workdir, rng)

    return run_cli("python -m firesteel.testing.soak", list(PATHS), factory, argv)


if __name__ == "__main__":
    sys.exit(main())
