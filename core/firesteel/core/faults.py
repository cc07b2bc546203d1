"""Fault points: named protocol steps at which a crash test may kill a job.

This module is the test hooks' one home, apart from the role interfaces
(:mod:`firesteel.core.sink`, :mod:`firesteel.core.spi`): a connector declares
its own points with :func:`fault_point` and fires the protocol's
(:data:`AFTER_WRITE` ... :data:`AFTER_COMMIT`, declared below) where its
commit reaches them. Each point is declared once, by the module that fires it
(the protocol's: here), at import::

    AFTER_SEND = fault_point("wal.after_send", "a WAL segment was sent, before its commit record")
    ...
    AFTER_SEND.fire(batch_id, partition)

and recorded in :data:`REGISTRY`, which the arming side checks every name it
arms against, so a misspelled point is an error instead of a kill that never
comes. A distribution lists its declaring modules under the entry point group
:data:`ENTRY_POINT_GROUP` so the arming side can import them first.

Firing calls this process's fault handler, which is a no-op unless one was
installed: explicitly with :func:`install_handler`, or by a distribution naming
it under the entry point group :data:`HANDLER_GROUP` (``firesteel-testing``
does, with the handler that kills where its crash harness armed). Product code
itself never kills: a job without the test tooling installed cannot be made to
kill itself, whatever its environment says.

The driver's commit of a batch runs inside :func:`committing`, so a handler can
tell which query's commit reached a point (:func:`committing_checkpoint`: the
checkpoint, hence Spark's query id) and aim a kill at one query of several
sharing a driver. A driver that starts several named queries reports each with
:func:`name_query`, which hands it to the query namer a test distribution
installs under :data:`NAMER_GROUP` (a no-op without one), so the handler can
tell a commit's query id by the name a test aims at.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from importlib.metadata import entry_points

from firesteel.core.errors import FiresteelError

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "firesteel.fault_points"
"""Entry point group naming the modules of a distribution that declare fault points."""

HANDLER_GROUP = "firesteel.fault_handler"
"""Entry point group naming the fault handler a test distribution installs (at most one)."""

NAMER_GROUP = "firesteel.query_namer"
"""Entry point group naming the query namer a test distribution installs (at most one)."""

FaultHandler = Callable[["FaultPoint", "int | None", "int | None"], None]
"""Called with the point, batch id and partition each time a fault point is reached."""

QueryNamer = Callable[[str, str], None]
"""Called with Spark's query id and the query's name each time a driver names a query."""


class FaultPointError(FiresteelError, ValueError):
    """A fault point is declared twice with different meanings, or armed but never declared."""


@dataclass(frozen=True)
class FaultPoint:
    """A named step at which a crash test may kill the job (see module docs)."""

    name: str
    meaning: str

    def fire(self, batch_id: int | None = None, partition: int | None = None) -> None:
        """Hand this step to the installed fault handler; a no-op when none is installed."""
        _handler()(self, batch_id, partition)


REGISTRY: dict[str, FaultPoint] = {}
"""Every fault point declared by a module imported so far, by name."""


def fault_point(name: str, meaning: str) -> FaultPoint:
    """Declare the fault point ``name`` (what has happened when it fires: ``meaning``).

    Called once at import by the module that fires it. Two modules firing the
    same step share one declaration; declaring a name again with another
    meaning is a :class:`FaultPointError`.
    """
    known = REGISTRY.get(name)
    if known is not None and known.meaning != meaning:
        msg = f"fault point {name!r} is already declared as {known.meaning!r}"
        raise FaultPointError(msg)
    point = known or FaultPoint(name, meaning)
    REGISTRY[name] = point
    return point


def no_fault(point: FaultPoint, batch_id: int | None, partition: int | None) -> None:
    """The handler of a process with no test tooling: reaching a point does nothing."""


_INSTALLED: dict[str, FaultHandler] = {}
"""This process's fault handler under the key ``handler``, once installed or looked up."""


def install_handler(handler: FaultHandler | None) -> None:
    """Make ``handler`` this process's fault handler; None looks it up again on the next fire."""
    if handler is None:
        _INSTALLED.clear()
    else:
        _INSTALLED["handler"] = handler


def _handler() -> FaultHandler:
    """This process's handler: the installed one, else the one :data:`HANDLER_GROUP` names.

    Looked up once per process, at the first point reached (Spark starts its
    Python workers itself, so only an entry point reaches them).
    """
    handler = _INSTALLED.get("handler")
    if handler is None:
        handler = _entry_point(HANDLER_GROUP, "fault handlers", no_fault)
        _INSTALLED["handler"] = handler
    return handler


def no_namer(query_id: str, name: str) -> None:
    """The query namer of a process with no test tooling: naming a query does nothing."""


_NAMER: dict[str, QueryNamer] = {}
"""This process's query namer under the key ``namer``, once looked up."""


def name_query(query_id: str, name: str) -> None:
    """Report that Spark's query ``query_id``, just started, is named ``name``.

    A driver running several queries (a pipeline's streamlets, a test's group of
    jobs) calls it for each, so a fault point of the driver's commit, which knows
    only its checkpoint (hence the query id), can be aimed at a query by name.
    Handed to the query namer :data:`NAMER_GROUP` names, looked up once per
    process; without one it does nothing.
    """
    namer = _NAMER.get("namer")
    if namer is None:
        namer = _entry_point(NAMER_GROUP, "query namers", no_namer)
        _NAMER["namer"] = namer
    namer(query_id, name)


def _entry_point(group: str, what: str, default: Callable[..., None]) -> Callable[..., None]:
    """The one callable entry point ``group`` names, else ``default``."""
    found = sorted(entry_points(group=group), key=lambda entry: entry.value)
    if len(found) > 1:
        names = ", ".join(entry.value for entry in found)
        msg = f"several {what} are installed ({names}); uninstall all but one"
        raise FaultPointError(msg)
    logger.debug("%s: %s", group, found[0].value if found else "none")
    loaded: Callable[..., None] = found[0].load() if found else default
    return loaded


_COMMITTING: ContextVar[str | None] = ContextVar("firesteel_committing", default=None)
"""The checkpoint of the query whose driver-side commit runs here, if any."""


@contextmanager
def committing(checkpoint: str) -> Iterator[None]:
    """Run the driver's commit of the query checkpointed at ``checkpoint`` inside this block."""
    token = _COMMITTING.set(checkpoint)
    try:
        yield
    finally:
        _COMMITTING.reset(token)


def committing_checkpoint() -> str | None:
    """The checkpoint of the query whose driver-side commit is running here, else None."""
    return _COMMITTING.get()


# The protocol's fault points, fired by every sink framework: the same protocol step has
# the same name in every sink, so every exactly-once path is killed at the same places.
AFTER_WRITE = fault_point(
    "sink.after_write", "a task wrote its records, before it prepared its commit and voted"
)
AFTER_PRE_COMMIT = fault_point(
    "sink.after_pre_commit", "a task prepared its commit durably, before its vote reached Spark"
)
BEFORE_COMMIT = fault_point(
    "driver.before_commit", "every task voted, before the driver commits the batch"
)
MID_COMMIT = fault_point(
    "driver.mid_commit", "inside the driver's commit: some of its durable steps done, not all"
)
AFTER_COMMIT = fault_point(
    "driver.after_commit", "the driver committed the batch, before Spark writes commits/N"
)
