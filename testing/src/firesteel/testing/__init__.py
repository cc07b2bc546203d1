"""The crash-test harness every firesteel connector's tests reuse.

* :class:`CrashHarness` runs a job script in a child process (its own session),
  kills it with SIGKILL at named protocol points (:func:`at_point`, which refuses
  a name no module declares: :mod:`firesteel.testing.points`) or at random times
  (:func:`at_random`), and restarts it from its checkpoint until a run completes; :func:`task_kills`
  kills tasks that Spark retries inside one run, at no JVM start each.
* :func:`assert_exactly_once` / :func:`assert_at_least_once` count
  sequence-numbered records in the output against the input.
* :class:`Spellings` and :func:`firesteel.testing.clock.clock_offset` change
  what a user changes between a crash and the restart: the checkpoint's
  spelling and the wall clock.
* :class:`StandaloneCluster` starts a Spark master and workers from the PySpark
  wheel, so a job can lose an executor as well as its driver.
* :mod:`firesteel.testing.jobs` helps write job scripts;
  :mod:`firesteel.testing.fixtures` holds the pytest fixtures.

Ships in the distribution ``firesteel-testing`` (``pip install -e ./testing``, or the
``test`` extra of ``firesteel`` and of each connector); library code never imports it.
"""

from firesteel.testing.checkpoint_spellings import Spellings
from firesteel.testing.cluster import StandaloneCluster
from firesteel.testing.counting import (
    SequenceCount,
    assert_at_least_once,
    assert_exactly_once,
    count_sequence,
)
from firesteel.testing.harness import (
    AtPoints,
    AtRandom,
    CrashHarness,
    CrashResult,
    HarnessError,
    JobFailedError,
    Kill,
    Part,
    RunRecord,
    RunTimeoutError,
    at_point,
    at_random,
    batch_started,
    fault_setting,
    in_one_run,
    task_kills,
)
from firesteel.testing.jobs import job_session

__all__ = [
    "AtPoints",
    "AtRandom",
    "CrashHarness",
    "CrashResult",
    "HarnessError",
    "JobFailedError",
    "Kill",
    "Part",
    "RunRecord",
    "RunTimeoutError",
    "SequenceCount",
    "Spellings",
    "StandaloneCluster",
    "assert_at_least_once",
    "assert_exactly_once",
    "at_point",
    "at_random",
    "batch_started",
    "count_sequence",
    "fault_setting",
    "in_one_run",
    "job_session",
    "task_kills",
]
