"""Test scheduling for the whole suite (every folder of ``testpaths``).

``make test`` runs the suite in two pytest-xdist workers that take one test at
a time (``--maxschedchunk 1``). The crash tests and the other tests marked
``slow`` or ``soak`` take minutes each and the rest seconds, so the slow ones
are handed out first: both workers then finish at about the same time instead of one
starting a seven-minute kill loop while the other has nothing left to do.
"""

from __future__ import annotations

import pytest

SLOW = ("crash", "slow", "soak")
"""Markers of the tests handed out first."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move tests marked ``crash``, ``slow`` or ``soak`` to the front, keeping their order."""
    items.sort(key=lambda item: not any(m.name in SLOW for m in item.iter_markers()))
