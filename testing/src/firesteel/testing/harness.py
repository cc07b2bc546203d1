"""The crash-test harness: run a job, kill it, restart it from its checkpoint, repeat.

Usage (see :mod:`firesteel.testing.jobs` for the job script convention)::

    harness = CrashHarness(tmp_path / "harness")
    try:
        result = harness.run(
            "tests/jobs/files_job.py", [src, out, ck],
            kills=[at_point("sink.after_write", batch=1),
                   at_point("driver.mid_commit", batch=3),
                   at_random((10.0, 20.0))],
        )
    finally:
        harness.close()
    assert result.kills == 3
    assert_exactly_once(read_output(out), range(n))

Each element of ``kills`` arms *one* run: run ``i`` carries ``kills[i]``, and
the run after the last kill carries none and must complete. A run ends in one
of three ways:

* the job exits 0: it is complete and :meth:`CrashHarness.run` returns;
* the job is SIGKILLed (by a fault point it reached, or by the harness at a
  random time): the harness kills whatever is left of it, waits until every
  process of the job is gone, and restarts it from the same checkpoint;
* anything else (a non-zero exit, the run timeout): :class:`JobFailedError` /
  :class:`RunTimeoutError`, with the tail of the run's log.

Traps:

* a point kill only fires if the run reaches that point. Runs resume where
  the previous one died, so list point kills in batch order; a kill armed for
  a batch the job already committed never fires and the run completes
  (``result.all_fired`` is then False and the remaining kills are unused);
* ``mode="process"`` kills only the process that reached the point (a Python
  worker: Spark retries the task, so the run usually completes). Use it with
  a master that allows task retries (the default ``local[2,4]``);
* ``at_random`` counts from the start of the run, JVM start-up (~8 s) included,
  unless ``when`` says otherwise (e.g. :func:`batch_started`).
"""

from __future__ import annotations

import logging
import os
import random
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import psutil

from firesteel.core.errors import FiresteelError
from firesteel.core.faults import FaultPoint
from firesteel.testing.faults import (
    FAULT_ENV,
    KILL_ENV,
    MARKER_DIR_ENV,
    MODE_SEPARATOR,
    PGID_ENV,
    gathered,
)
from firesteel.testing.jobs import DEFAULT_MASTER, MASTER_ENV
from firesteel.testing.jvm import ARCHIVE_ENV, driver_archive
from firesteel.testing.points import check_point
from firesteel.testing.processes import (
    TOKEN_ENV,
    ProcessTracker,
    find_executors,
    kill_process_and_descendants,
    spawn_logged,
)
from firesteel.testing.together import PART_SEPARATOR, TOGETHER_FLAG

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.2
"""How often a run's exit and the moment of its random kill are checked."""

TRACK_SECONDS = 2.0
"""How often a running job's processes are recorded (:meth:`ProcessTracker.refresh`).

A record walks the job's process tree; finding processes by their token also reads
every process's environment, which at every poll took the test's own process
40-100% of a core on a machine running a few hundred processes (profiled: 150 of a
crash test's 268 s). So a running job is recorded through its tree only, and less
often; that misses nothing: while the job runs, its processes hang from its tree
(only a crash orphans them), a kill records the tree again first, and the end of
every run finds and kills the job's processes by their token wherever they are.
"""


class HarnessError(FiresteelError):
    """A crash-test run did not go as planned (the message names the run and its log)."""


class JobFailedError(HarnessError):
    """The job exited with an error the harness did not cause."""


class RunTimeoutError(HarnessError):
    """A run outlived its timeout; the harness killed it."""


@dataclass(frozen=True)
class AtPoints:
    """Arm named fault points (``point@batch[:partition]``) for one run.

    ``mode`` is ``FIRESTEEL_FAULT_KILL``: ``job`` kills the driver's process
    group and the caller's (a crash of the whole job); ``process`` kills only
    the process that reached the point (a task failure when it is a worker).
    Each spec fires at most once per :meth:`CrashHarness.run`, even when Spark
    retries the task that reached it. In ``job`` mode the first spec reached
    ends the run and the others are disarmed with it, so give one spec per run;
    in ``process`` mode several task kills can fire in one run.
    """

    specs: tuple[str, ...]
    mode: Literal["job", "process"] = "job"


def fault_setting(*kills: AtPoints) -> str:
    """The ``FIRESTEEL_FAULT`` value arming every spec of ``kills``, each killing in its own
    kill's mode (``spec!mode``, :data:`~firesteel.testing.faults.MODE_SEPARATOR`): for a
    process the harness does not start, such as a pipeline's, whose one environment arms a
    task kill and a whole-job kill together."""
    return ",".join(f"{spec}{MODE_SEPARATOR}{kill.mode}" for kill in kills for spec in kill.specs)


@dataclass(frozen=True)
class AtRandom:
    """The harness SIGKILLs the job at a random moment of one run.

    The delay is drawn uniformly from ``window`` (seconds) and counts from the
    start of the run, or from the first moment ``when()`` returns True.
    ``target="job"`` kills the driver's whole process tree; ``target="executor"``
    kills one executor JVM of this job (standalone cluster only) and the run
    goes on: Spark reschedules the executor's tasks.
    """

    window: tuple[float, float]
    target: Literal["job", "executor"] = "job"
    when: Callable[[], bool] | None = None


Kill = AtPoints | AtRandom
"""What one run is armed with."""

Args = Sequence[str | os.PathLike[str]]


@dataclass(frozen=True)
class Part:
    """One job script of a group sharing a driver (:meth:`CrashHarness.run_together`).

    ``name`` names the part's query (aim task kills at it with ``query=name``);
    ``args`` and ``env`` are as :meth:`CrashHarness.run`'s, per run.
    """

    name: str
    script: str | os.PathLike[str]
    args: Args | Callable[[int], Args] = ()
    env: Callable[[int], Mapping[str, str]] | None = None

    def command(self, run: int) -> list[str]:
        """The part's words on the launcher's command line in run ``run``."""
        args = self.args(run) if callable(self.args) else self.args
        return [self.name, str(self.script), *map(str, args)]


def _in_query(query: str | Sequence[str] | None) -> str:
    if query is None or isinstance(query, str):
        return f"#{query}" if query else ""
    return "#" + "+".join(query)


def at_point(
    point: str | FaultPoint,
    batch: int | None = None,
    partition: int | None = None,
    mode: Literal["job", "process"] = "job",
    query: str | Sequence[str] | None = None,
) -> AtPoints:
    """Arm one declared fault point (see :mod:`firesteel.testing.points`) for one run.

    ``query`` limits it to the query of that name (a part of
    :meth:`CrashHarness.run_together`): its tasks, and its driver's commit. Several
    names gather those queries: each waits at the point until all of them reached it
    (``batch`` then counts in each query's own batches), and one SIGKILL of the whole job
    lands inside all of them; :attr:`CrashResult.gathered` says which had arrived.
    """
    gathering = query is not None and not isinstance(query, str)
    if gathering and (mode != "job" or len(query or ()) < 2):
        msg = f"gathering needs two queries or more and mode='job', got {query} in {mode}"
        raise HarnessError(msg)
    spec = check_point(point)
    if batch is not None:
        spec += f"@{batch}"
        if partition is not None:
            spec += f":{partition}"
    return AtPoints((spec + _in_query(query),), mode)


def task_kills(
    points: Sequence[str | FaultPoint],
    batches: Sequence[int],
    partitions: Sequence[int] = (),
    query: str | None = None,
) -> AtPoints:
    """Kill a task at each of ``points`` in each of ``batches`` (``mode="process"``).

    Without ``partitions`` each point kills whichever task of the batch reaches it
    first; with them, the task of each partition named. One run takes them all:
    Spark retries each killed task in a new Python worker inside the same driver,
    so these kills cost no JVM start. Each point kills one attempt of a task, and
    ``local[2,4]`` gives a task four attempts: give at most three points, or the
    fourth kill fails the query. Only points reached inside tasks belong here
    (``driver.*`` points run on the driver, where a killed Python process fails
    the query, not a task). ``query`` aims the kills at the tasks of one query of a
    :meth:`CrashHarness.run_together` group.
    """
    if len(points) > 3:
        msg = f"{len(points)} kills per task outlive its four attempts: give at most three"
        raise HarnessError(msg)
    names = [check_point(point) for point in points]
    where = [f":{partition}" for partition in partitions] or [""]
    scope = _in_query(query)
    specs = tuple(
        f"{name}@{batch}{at}{scope}" for batch in batches for at in where for name in names
    )
    return AtPoints(specs, mode="process")


def in_one_run(*kills: AtPoints) -> AtPoints:
    """Several :class:`AtPoints` armed in the same run (e.g. :func:`task_kills` aimed at
    each query of a :meth:`CrashHarness.run_together` group); they must share a mode."""
    modes = {kill.mode for kill in kills}
    if len(modes) != 1:
        msg = f"kills armed in one run need one mode, got {sorted(modes)}"
        raise HarnessError(msg)
    return AtPoints(tuple(spec for kill in kills for spec in kill.specs), modes.pop())


def at_random(
    window: tuple[float, float],
    target: Literal["job", "executor"] = "job",
    when: Callable[[], bool] | None = None,
) -> AtRandom:
    """A kill at a random time of one run (see :class:`AtRandom`)."""
    return AtRandom(window, target, when)


def batch_started(checkpoint: str | os.PathLike[str], batch: int) -> Callable[[], bool]:
    """A ``when`` condition: Spark logged ``offsets/<batch>`` in this local checkpoint."""
    path = Path(checkpoint) / "offsets" / str(batch)
    return path.exists


def next_batch(checkpoint: str | os.PathLike[str]) -> int:
    """The batch a restart from this local checkpoint runs first: one past the last commit."""
    commits = Path(checkpoint) / "commits"
    done = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
    return max(done, default=-1) + 1


@dataclass
class RunRecord:
    """What happened in one run of the job."""

    index: int
    kill: Kill | None
    """What the run was armed with."""
    exit_code: int | None
    """The job process's exit code; ``-9`` when SIGKILLed (by a point or the harness)."""
    duration: float
    log: Path
    fired: list[str] = field(default_factory=list)
    """Fault specs that fired in this run (several for ``mode="process"`` task kills)."""
    killed_pids: list[int] = field(default_factory=list)
    """PIDs the harness killed itself (random kills, executor kills); empty if it did not."""
    gathered: dict[str, list[str]] = field(default_factory=dict)
    """For each fired spec aimed at several queries: the queries waiting at its point."""

    @property
    def killed(self) -> bool:
        """A kill happened in this run (a point fired or the harness killed)."""
        return bool(self.fired or self.killed_pids)


@dataclass
class CrashResult:
    """The runs of one :meth:`CrashHarness.run`, the last of which completed."""

    runs: list[RunRecord]
    planned: int
    """How many kills were asked for."""

    @property
    def kills(self) -> int:
        """Kills that actually happened: fired points plus the harness's own kills."""
        return sum(len(run.fired) + bool(run.killed_pids) for run in self.runs)

    @property
    def fired(self) -> list[str]:
        """Every fault spec that fired, in order."""
        return [spec for run in self.runs for spec in run.fired]

    @property
    def gathered(self) -> dict[str, list[str]]:
        """For each fired spec aimed at several queries, the queries inside its point."""
        return {spec: names for run in self.runs for spec, names in run.gathered.items()}

    @property
    def restarts(self) -> int:
        """Runs started after the first."""
        return len(self.runs) - 1

    @property
    def exit_codes(self) -> list[int | None]:
        """Exit code of every run, in order."""
        return [run.exit_code for run in self.runs]

    @property
    def logs(self) -> list[Path]:
        """Log file (stdout and stderr) of every run, in order."""
        return [run.log for run in self.runs]

    @property
    def all_fired(self) -> bool:
        """Every planned kill happened (each spec of an :class:`AtPoints` counts as one)."""
        return self.kills == self.planned

    def summary(self) -> str:
        """One line per run, for assertion messages."""
        return "\n".join(
            f"run {r.index}: kill={r.kill} exit={r.exit_code} fired={r.fired} "
            f"harness-killed={len(r.killed_pids)} pids "
            f"{r.duration:.1f}s log={r.log}"
            for r in self.runs
        )


def _planned(kills: Sequence[Kill]) -> int:
    return sum(len(kill.specs) if isinstance(kill, AtPoints) else 1 for kill in kills)


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "<no log>"


class CrashHarness:
    """Runs job scripts under SIGKILL and restarts them until they complete.

    ``workdir`` receives one log per run and the fault markers; ``master`` is
    passed to the job as ``FIRESTEEL_SPARK_MASTER`` (``local[2,4]`` by default,
    or a :class:`~firesteel.testing.cluster.StandaloneCluster` URL); ``env`` is
    added to the job's environment. Every run is bounded by ``timeout``
    seconds. Unless ``jvm_archive`` is False, the job's driver JVM maps a
    class archive made once per machine (:mod:`firesteel.testing.jvm`), which
    takes about 2 s off every start. :meth:`close` (or leaving the ``with``
    block) kills anything still running, so use it in a ``finally`` or
    through the ``crash_harness`` fixture.
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        *,
        master: str = DEFAULT_MASTER,
        timeout: float = 240.0,
        env: Mapping[str, str] | None = None,
        seed: int | None = None,
        python: str = sys.executable,
        jvm_archive: bool = True,
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.master = master
        self.timeout = timeout
        self.env = dict(env or {})
        self.python = python
        self.jvm_archive = jvm_archive
        self.random = random.Random(seed)
        self._active: list[ProcessTracker] = []
        self._calls = 0

    def __enter__(self) -> CrashHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(
        self,
        script: str | os.PathLike[str],
        args: Sequence[str | os.PathLike[str]]
        | Callable[[int], Sequence[str | os.PathLike[str]]] = (),
        kills: Sequence[Kill] = (),
        *,
        max_runs: int | None = None,
        env: Callable[[int], Mapping[str, str]] | None = None,
    ) -> CrashResult:
        """Run ``python script args`` with ``kills[i]`` armed in run ``i`` until a run completes.

        ``args`` may be a function of the run index, for what a user changes
        between a crash and the restart (parallelism, a path spelled otherwise,
        see :class:`~firesteel.testing.checkpoint_spellings.Spellings`); so may extra
        environment variables ``env`` (a clock set back, see
        :func:`~firesteel.testing.clock.clock_offset`).

        Returns once a run exits 0 (its kill, if any, may or may not have
        fired: check :attr:`CrashResult.all_fired`). ``max_runs`` (default:
        ``len(kills) + 2``) bounds the restarts. Raises :class:`JobFailedError`
        on any exit the harness did not cause and :class:`RunTimeoutError` when
        a run outlives the timeout; both leave no process behind.
        """
        call, faults_dir = self._new_call()
        limit = max_runs if max_runs is not None else len(kills) + 2
        runs: list[RunRecord] = []
        for index in range(limit):
            kill = kills[index] if index < len(kills) else None
            log = self.workdir / f"run-{call}-{index}.log"
            run_args = args(index) if callable(args) else args
            record = self._run_once(
                index,
                script=script,
                args=run_args,
                kill=kill,
                faults_dir=faults_dir,
                log=log,
                env=env(index) if env is not None else {},
            )
            runs.append(record)
            if record.exit_code == 0:
                return CrashResult(runs, planned=_planned(kills))
        summary = CrashResult(runs, planned=_planned(kills)).summary()
        msg = f"{script}: no run completed within {limit} runs\n{summary}"
        raise HarnessError(msg)

    def run_together(
        self,
        parts: Sequence[Part],
        kills: Sequence[Kill] = (),
        *,
        max_runs: int | None = None,
    ) -> CrashResult:
        """Run several job scripts in one driver, as :meth:`run` runs one.

        Each run starts one job process whose driver runs every part's query
        (:mod:`firesteel.testing.together`), so every kill of the run (a point reached by
        any part's query, a random moment) crashes all of them at once, and each part
        recovers from it at its restart: several exactly-once paths share the price of
        each restart. A run completes when every part's query has; one failed query
        fails the run. The parts' environments are merged, later parts winning.
        """
        names = [part.name for part in parts]
        if len(set(names)) != len(names):
            msg = f"parts need distinct names (they name the queries): {names}"
            raise HarnessError(msg)

        def args(run: int) -> list[str]:
            words: list[str] = []
            for part in parts:
                words += [PART_SEPARATOR, *part.command(run)] if words else part.command(run)
            return words

        def env(run: int) -> dict[str, str]:
            merged: dict[str, str] = {}
            for part in parts:
                merged.update(part.env(run) if part.env is not None else {})
            return merged

        return self.run(TOGETHER_FLAG, args, kills, max_runs=max_runs, env=env)

    def attempt(
        self,
        script: str | os.PathLike[str],
        args: Sequence[str | os.PathLike[str]],
        kill: Kill | None,
        *,
        env: Mapping[str, str] | None = None,
    ) -> RunRecord:
        """One run armed with ``kill``, not restarted: it is killed or it completes.

        For chains where the next run, not a restart loop, recovers this one:
        the soak command feeds new input between a kill and the restart, so
        every restart recovers a crash and then takes more input. Raises like
        :meth:`run` on an exit the harness did not cause.
        """
        call, faults_dir = self._new_call()
        return self._run_once(
            0,
            script=script,
            args=args,
            kill=kill,
            faults_dir=faults_dir,
            log=self.workdir / f"run-{call}-0.log",
            env=env or {},
        )

    def _new_call(self) -> tuple[int, Path]:
        """A number and an empty fault-marker folder: each spec fires once per call."""
        self._calls += 1
        faults_dir = self.workdir / f"faults-{self._calls}"
        faults_dir.mkdir(parents=True, exist_ok=True)
        return self._calls, faults_dir

    def close(self) -> None:
        """Kill every process of every run still going (by PID) and wait for them."""
        while self._active:
            tracker = self._active.pop()
            tracker.kill_all()

    def _environment(self, kill: Kill | None, faults_dir: Path, token: str) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in (FAULT_ENV, KILL_ENV, PGID_ENV, MARKER_DIR_ENV, TOKEN_ENV)
        }
        env.update(self.env)
        env.update(
            {
                "PYSPARK_PYTHON": self.python,
                "PYSPARK_DRIVER_PYTHON": self.python,
                MARKER_DIR_ENV: str(faults_dir),
                TOKEN_ENV: token,
                MASTER_ENV: self.master,
                "SPARK_LOCAL_IP": "127.0.0.1",
                "PYTHONUNBUFFERED": "1",
            }
        )
        # A SIGKILLed JVM leaves its scratch folders (blockmgr-*, spark-*, artifacts-*)
        # behind: keep them in the harness's workdir rather than strewn over /tmp.
        if "SPARK_LOCAL_DIRS" not in self.env:
            env["SPARK_LOCAL_DIRS"] = str(self.workdir / "spark-local")
        if "TMPDIR" not in self.env:
            scratch = self.workdir / "tmp"
            scratch.mkdir(exist_ok=True)
            env["TMPDIR"] = str(scratch)
        archive = driver_archive() if self.jvm_archive else None
        if archive is not None:
            env.setdefault(ARCHIVE_ENV, str(archive))
        if isinstance(kill, AtPoints):
            env[FAULT_ENV] = ",".join(kill.specs)
            env[KILL_ENV] = kill.mode
        return env

    def _run_once(
        self,
        index: int,
        *,
        script: str | os.PathLike[str],
        args: Sequence[str | os.PathLike[str]],
        kill: Kill | None,
        faults_dir: Path,
        log: Path,
        env: Mapping[str, str],
    ) -> RunRecord:
        if (
            isinstance(kill, AtRandom)
            and kill.target == "executor"
            and self.master.startswith("local")
        ):
            msg = f"run {index}: an executor kill needs a standalone cluster, not {self.master}"
            raise HarnessError(msg)
        token = uuid.uuid4().hex
        command = [self.python, "-m", "firesteel.testing.launch", str(script), *map(str, args)]
        fired_before = set(os.listdir(faults_dir))
        started = time.monotonic()
        logger.info("harness run %d (%s): %s", index, kill, " ".join(command))
        proc = spawn_logged(command, log, {**self._environment(kill, faults_dir, token), **env})
        tracker = ProcessTracker(psutil.Process(proc.pid), token)
        self._active.append(tracker)
        killed_pids: list[int] = []
        harness_killed = False
        try:
            deadline = started + self.timeout
            kill_at: float | None = None
            tracked = started - TRACK_SECONDS
            while proc.poll() is None:
                now = time.monotonic()
                if now - tracked >= TRACK_SECONDS:
                    tracker.refresh(scan_tokens=False)
                    tracked = now
                if now > deadline:
                    msg = (
                        f"{script}: run {index} timed out after {self.timeout:.0f}s "
                        f"(log {log}):\n{_tail(log)}"
                    )
                    raise RunTimeoutError(msg)
                if isinstance(kill, AtRandom) and not harness_killed:
                    if kill_at is None and (kill.when is None or kill.when()):
                        kill_at = now + self.random.uniform(*kill.window)
                    if kill_at is not None and now >= kill_at:
                        # An executor may not exist yet: then try again at the next poll.
                        killed_pids = self._kill(kill, tracker, index)
                        harness_killed = bool(killed_pids)
                time.sleep(POLL_SECONDS)
            exit_code = proc.returncode
        finally:
            # Whatever ended the run, nothing of it may outlive it (orphans included).
            tracker.kill_all()
            proc.wait()
            self._active.remove(tracker)
        # Dot-folders hold the launcher's query names and gathered arrivals, not fired specs.
        fired = sorted(
            name for name in set(os.listdir(faults_dir)) - fired_before if name[0] != "."
        )
        record = RunRecord(
            index=index,
            kill=kill,
            exit_code=exit_code,
            duration=time.monotonic() - started,
            log=log,
            fired=fired,
            killed_pids=killed_pids,
            gathered={
                spec: gathered(faults_dir, spec) for spec in fired if "+" in spec.partition("#")[2]
            },
        )
        logger.info("harness run %d ended: exit %s, killed %s", index, exit_code, record.killed)
        if exit_code not in (0, -9):
            msg = f"{script}: run {index} exited with {exit_code} (log {log}):\n{_tail(log)}"
            raise JobFailedError(msg)
        if exit_code == -9 and not record.killed:
            msg = f"{script}: run {index} was SIGKILLed by someone else (log {log})"
            raise JobFailedError(msg)
        return record

    def _kill(self, kill: AtRandom, tracker: ProcessTracker, index: int) -> list[int]:
        if kill.target == "job":
            tracker.refresh(scan_tokens=False)
            pids = [p.pid for p in tracker.alive()]
            logger.info("harness run %d: killing the job (%d processes)", index, len(pids))
            tracker.kill_tree()
            return pids
        executors = find_executors(tracker.token)
        if not executors:
            logger.warning("harness run %d: no executor to kill yet", index)
            return []
        victim = self.random.choice(executors)
        logger.info("harness run %d: killing executor %d", index, victim.pid)
        return kill_process_and_descendants(victim)
