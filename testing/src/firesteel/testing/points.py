"""Arming fault points: a name the harness arms must be one some library module declared.

Library modules declare their points with :func:`firesteel.core.faults.fault_point`
at import, and list those modules under the entry point group
:data:`~firesteel.core.faults.ENTRY_POINT_GROUP`. :func:`check_point` imports them
(once, when a name is not yet known) and refuses a name none of them declared, so a
misspelled point fails the test that arms it instead of never firing.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from importlib.metadata import entry_points
from types import MappingProxyType

from firesteel.core.faults import ENTRY_POINT_GROUP, REGISTRY, FaultPoint, FaultPointError

__all__ = ["UnknownFaultPointError", "check_point", "registered"]


class UnknownFaultPointError(FaultPointError):
    """A test arms a fault point that no installed module declares."""

    def __init__(self, name: str, known: Mapping[str, FaultPoint]) -> None:
        close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
        hint = f"; close matches: {', '.join(close)}" if close else ""
        super().__init__(
            f"fault point {name!r} is not declared by any installed module{hint} "
            f"(declared: {', '.join(sorted(known))})"
        )
        self.name = name
        self.close_matches = close


def registered() -> Mapping[str, FaultPoint]:
    """Every fault point the installed distributions declare, by name."""
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        entry.load()
    return MappingProxyType(REGISTRY)


def check_point(point: str | FaultPoint) -> str:
    """The name of ``point``; :class:`UnknownFaultPointError` unless some module declared it."""
    name = point.name if isinstance(point, FaultPoint) else point
    if name in REGISTRY:
        return name
    known = registered()
    if name not in known:
        raise UnknownFaultPointError(name, known)
    return name
