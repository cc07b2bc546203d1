"""One checkpoint folder spelled the ways users spell it, for restarts that change the spelling.

A user restarts a crashed query with ``/data/ck`` or ``/data/ck/``, as the URI
``file:///data/ck``, or through a symlinked mount: Spark takes all of them for
the same checkpoint, and so must every sink and state backend. A crash test
passes :class:`Spellings` as (part of) its per-run arguments so that every
restart names the checkpoint differently from the run it recovers.
"""

from __future__ import annotations

from pathlib import Path


class Spellings:
    """The spellings of ``folder``; ``spellings(run)`` is the one restart ``run`` uses.

    Creates ``folder`` (an empty folder is a fresh checkpoint to Spark) and a
    symlink ``<folder>-link`` to it beside it.
    """

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        link = folder.with_name(f"{folder.name}-link")
        if not link.is_symlink():
            link.symlink_to(folder, target_is_directory=True)
        self.variants: tuple[str, ...] = (
            str(folder),
            f"file://{link}/",
            f"{folder}/",
            str(link),
            f"file://{folder}",
        )
        self.starts = 0
        """Starts spelled so far by :meth:`next` (a resumed soak sets it back)."""

    def __call__(self, run: int) -> str:
        """Restart ``run``'s spelling: consecutive runs never share one."""
        return self.variants[run % len(self.variants)]

    def next(self) -> str:
        """The spelling of the next start, across calls: a soak's restarts cycle through all."""
        spelling = self(self.starts)
        self.starts += 1
        return spelling
