"""Crash test of event time on keyed state, in the suite's budget: session windows with late
data and the interval join, two queries of one driver sharing its kills.

- windows: files -> session windows (gap, allowed lateness, late records to the side output)
  -> the transactional file sink;
- join: two file inputs -> ``IntervalJoin`` -> the transactional file sink.

The whole job is SIGKILLed twice, each time inside both queries' commits on the driver,
gathered (each query waits at the point until both are there): in batch 1 at
``driver.mid_commit`` (the file sink's manifest written, its files not all published, the
batch's state snapshots written and not yet committed), then in the restart's batch 3 at
``driver.after_commit`` (the sink's commit done, Spark's ``commits/3`` not written: the
batch is re-run and must not publish twice). Each start runs both operators at another
parallelism (the windows also at another input ``repartition``), and the run that
completes loses two tasks of each query (after a snapshot, after a write; Spark retries
them, no JVM start). The outputs, read with pyarrow, match the plain-Python references:
every window result exactly once (re-emitted only for allowed-lateness updates), every late
record once, every pair the join's interval holds once. The long loops of kills at named
points and at random are the soak command's ``windows`` and ``join`` paths
(``python -m firesteel.testing.soak join --cycles 10``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from firesteel.testing import CrashHarness, Part, at_point, in_one_run, task_kills
from firesteel.testing.checkpoint_spellings import Spellings
from firesteel.testing.joins import FILES_PER_BATCH as JOIN_FILES_PER_BATCH
from firesteel.testing.joins import check_join_output, write_join_files
from firesteel.testing.scripts import script
from firesteel.testing.windows import check_window_output, write_window_files

pytestmark = [pytest.mark.crash, pytest.mark.timeout(900)]

FILES = 12
FILES_PER_BATCH = 2
RESTARTS = [("3", "0"), ("2", "3"), ("1", "2")]
"""The windows' (operator parallelism, input partitions) of each start."""
JOIN_FILES = 10
JOIN_PARALLELISM = ["2", "3", "1"]
"""The join's operator parallelism of each start."""


def windows_part(root: Path, operator: str = "sessions") -> Part:
    """Session windows with late data (or ``operator`` ``tumbling``: tumbling windows
    dropping late records, combined before the shuffle), local files in and out."""
    source, out = root / "in", root / "out"
    write_window_files(source, 0, FILES)
    checkpoints, states = Spellings(root / "ck"), Spellings(root / "state")

    def args(run: int) -> list[str]:
        parallelism, partitions = RESTARTS[run % len(RESTARTS)]
        return [
            str(source),
            str(out),
            checkpoints(run),
            states(run),
            str(FILES_PER_BATCH),
            parallelism,
            partitions,
            operator,
        ]

    return Part("windows", script("windows_job"), args)


def join_part(root: Path) -> Part:
    """The interval join of two file inputs, local files in and out."""
    write_join_files(root / "in", 0, JOIN_FILES)
    checkpoints, states = Spellings(root / "ck"), Spellings(root / "state")

    def args(run: int) -> list[str]:
        return [
            str(root / "in"),
            str(root / "out"),
            checkpoints(run),
            states(run),
            str(JOIN_FILES_PER_BATCH),
            JOIN_PARALLELISM[run % len(JOIN_PARALLELISM)],
        ]

    return Part("join", script("join_job"), args)


def test_windows_and_interval_join_survive_sigkill_and_rescale(tmp_path: Path) -> None:
    parts = [windows_part(tmp_path / "windows"), join_part(tmp_path / "join")]
    kills = [
        # Both queries wait inside their commit until both are there: each kill lands in
        # both commits.
        at_point("driver.mid_commit", batch=1, query=["windows", "join"]),
        at_point("driver.after_commit", batch=3, query=["windows", "join"]),
        in_one_run(
            task_kills(["state.after_snapshot", "sink.after_write"], [3], query="windows"),
            task_kills(["state.after_snapshot", "sink.after_write"], [3], query="join"),
        ),
    ]
    # Two queries share two cores: the run that completes takes longer than one job's.
    with CrashHarness(tmp_path / "harness", timeout=480) as harness:
        result = harness.run_together(parts, kills)
    assert result.exit_codes == [-9, -9, 0], result.summary()
    assert result.all_fired and result.kills == 6, result.summary()
    gathered = [sorted(q) for q in result.gathered.values()]
    assert gathered == [["join", "windows"]] * 2, result.gathered
    found = check_window_output(tmp_path / "windows" / "out", FILES, FILES_PER_BATCH)
    assert found["results"] and found["late"] and found["re_emitted"], found
    assert (found["missing"], found["duplicated"], found["unexpected"]) == (0, 0, 0), found
    joined = check_join_output(tmp_path / "join" / "out", JOIN_FILES)
    assert joined["pairs"] > 50, joined
    assert (joined["missing"], joined["duplicated"], joined["unexpected"]) == (0, 0, 0), joined
    assert joined["late"] == 0, joined


def test_tumbling_windows_combined_before_the_shuffle_survive_sigkill_and_rescale(
    tmp_path: Path,
) -> None:
    """Tumbling windows with ``late="drop"``: each input task combines its records per key
    and window before the shuffle. Killed inside the sink's commit and after it, two tasks
    lost in the run that completes, each start at another parallelism and input
    partitioning: every window result exactly once, re-emitted only for allowed-lateness
    updates, the dropped late records in none."""
    part = windows_part(tmp_path, "tumbling")
    kills = [
        at_point("driver.mid_commit", batch=1),
        at_point("driver.after_commit", batch=3),
        task_kills(["state.after_snapshot", "sink.after_write"], [3]),
    ]
    with CrashHarness(tmp_path / "harness", timeout=480) as harness:
        result = harness.run(part.script, part.args, kills)
    assert result.exit_codes == [-9, -9, 0], result.summary()
    assert result.all_fired, result.summary()
    found = check_window_output(tmp_path / "out", FILES, FILES_PER_BATCH, operator="tumbling")
    assert found["results"] and found["re_emitted"] and found["late"], found
    assert (found["missing"], found["duplicated"], found["unexpected"]) == (0, 0, 0), found
