"""Errors of the pipeline layer, in firesteel's error tree."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

from firesteel.core import ConfigError


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or nothing when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class ConfigurationError(ConfigError):
    """A streamlet's configuration is invalid; names the streamlet, the key and the fix."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a blueprint, with where it is and what to do."""

    message: str
    file: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}: " if self.file and self.line else ""
        if self.file and not self.line:
            where = f"{self.file}: "
        return f"{where}{self.message}"


class BlueprintError(ConfigError):
    """A blueprint failed verification; carries every problem found, not just the first."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        listed = "\n".join(f"  - {problem}" for problem in self.problems)
        super().__init__(f"the blueprint has {len(self.problems)} problem(s):\n{listed}")
