"""Several crash-test job scripts in one driver: their queries share a JVM, and every kill.

A whole-job SIGKILL costs a restart of the driver JVM, Spark's session and its
Python runners (15-20 s, most of a crash test's time, see the README's testing
section). Exactly-once paths that do not disturb each other can share those
restarts: :meth:`~firesteel.testing.harness.CrashHarness.run_together` starts
one driver process running several job scripts, each of whose queries is named
after its script's part, and every kill of a run (a protocol point reached by
one query, a random moment) crashes all of them, so each path gets every kill
of the run for the price of one restart. A task kill can be aimed at one query
(``task_kills(..., query=name)``: the fault spec's ``#name``), and so can a point of the
driver's commit, and one kill can gather several queries inside their commits
(``at_point(..., query=[a, b])``): the launcher records each query's id under its name.

Inside the job process, :func:`run_parts` runs each part's script in turn;
:func:`~firesteel.testing.jobs.run_available` then starts the script's query
under the part's name and returns (:func:`start_in_group`) instead of waiting
for it, and :func:`run_parts` waits for all of them, failing as soon as one fails.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from firesteel.testing.faults import name_query

if TYPE_CHECKING:
    from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

TOGETHER_FLAG = "--together"
"""The launcher's flag before the parts: ``name script args... --and name script args...``."""
PART_SEPARATOR = "--and"
WAIT_SECONDS = 1
"""How long :func:`run_parts` waits on one query before looking at the next."""


@dataclass
class _Group:
    active: bool = False
    """True while :func:`run_parts` runs the parts' scripts in this process."""
    part: str = ""
    queries: list[StreamingQuery] = field(default_factory=list)


_GROUP = _Group()


def start_in_group(writer: DataStreamWriter, checkpoint: str) -> bool:
    """Start ``writer``'s availableNow query named after the running part, if the job runs
    in a group; False (nothing started) when it runs alone."""
    if not _GROUP.active:
        return False
    query = (
        writer.queryName(_GROUP.part)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    name_query(str(query.id), _GROUP.part)
    _GROUP.queries.append(query)
    return True


def split_parts(argv: Sequence[str]) -> list[list[str]]:
    """``name script args... --and name script args...`` as one list per part."""
    parts: list[list[str]] = [[]]
    for arg in argv:
        if arg == PART_SEPARATOR:
            parts.append([])
        else:
            parts[-1].append(arg)
    if any(len(part) < 2 for part in parts):
        msg = f"each part needs a name and a script: {' '.join(argv)}"
        raise SystemExit(msg)
    return parts


def run_script(script: str, args: Sequence[str]) -> None:
    """Run ``script`` as ``__main__`` with ``args``, as ``python script args`` would: the
    script's folder first on the path."""
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


def run_parts(parts: Sequence[Sequence[str]]) -> None:
    """Run each part's script (``[name, script, *args]``) as ``__main__``, then wait for
    every query they started; a failed query fails the process at once."""
    _GROUP.active = True
    for name, script, *args in parts:
        _GROUP.part = name
        run_script(script, args)
    _GROUP.active = False
    pending = list(_GROUP.queries)
    while pending:
        # awaitTermination raises the query's error if it failed, so one failed part
        # ends the run while the others may still be going.
        pending = [query for query in pending if not query.awaitTermination(WAIT_SECONDS)]
    if _GROUP.queries:
        from pyspark.sql import SparkSession

        SparkSession.active().stop()
