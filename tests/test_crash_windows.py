"""Crash test of event-time timers and session windows with late data, in the suite's budget.

files -> session windows (gap, allowed lateness, late records to the side output) -> the
transactional file sink: the whole job SIGKILLed after a task's state snapshot, restarted at
another operator parallelism and input ``repartition``, and in that run two tasks killed
(after a snapshot, after a write; Spark retries them, no JVM start). The output, read with
pyarrow, matches the plain-Python reference fed the same batches: every window result
exactly once (re-emitted only for allowed-lateness updates), every late record once. One
whole-job kill keeps the test within the suite's budget (each costs a JVM start); the long
loop of whole-job kills at named points and at random is the soak command's ``windows``
path (``python -m firesteel.testing.soak windows --cycles 10``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from firesteel.testing import CrashHarness, at_point, task_kills
from firesteel.testing.scripts import script
from firesteel.testing.spellings import Spellings
from firesteel.testing.windows import check_window_output, write_window_files

pytestmark = [pytest.mark.crash, pytest.mark.timeout(300)]

FILES = 12
FILES_PER_BATCH = 2
RESTARTS = [("3", "0"), ("2", "3")]
"""(operator parallelism, input partitions) of each start."""


def test_session_windows_with_late_data_survive_sigkill_and_rescale(
    crash_harness: CrashHarness, tmp_path: Path
) -> None:
    source, out = tmp_path / "in", tmp_path / "out"
    write_window_files(source, 0, FILES)
    checkpoints, states = Spellings(tmp_path / "ck"), Spellings(tmp_path / "state")

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
        ]

    kills = [
        at_point("state.after_snapshot", batch=1, partition=1),
        task_kills(["state.after_snapshot", "sink.after_write"], [3]),
    ]
    result = crash_harness.run(script("windows_job"), args, kills)
    assert result.exit_codes == [-9, 0], result.summary()
    assert result.all_fired and result.kills == 3, result.summary()
    found = check_window_output(out, FILES, FILES_PER_BATCH)
    assert found["results"] and found["late"] and found["re_emitted"], found
    assert (found["missing"], found["duplicated"], found["unexpected"]) == (0, 0, 0), found
