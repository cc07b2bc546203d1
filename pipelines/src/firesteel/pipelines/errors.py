"""Errors of the pipeline layer, in firesteel's error tree."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from firesteel.core import ConfigError


def line_of(source: str, *keys: str) -> int | None:
    """The first line of ``source`` where ``keys`` appear in order as HOCON keys.

    pyhocon keeps no positions, so this finds the key's text: good enough to jump to,
    not proof that this occurrence is the one in effect.
    """
    lines = source.splitlines()
    position = 0
    for key in keys:
        pattern = re.compile(rf'(^|[\s{{,."]){re.escape(key)}"?\s*([=:{{.]|$)')
        found = next((i for i in range(position, len(lines)) if pattern.search(lines[i])), None)
        if found is None:
            return position + 1 if position else None
        position = found
    return position + 1


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or nothing when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


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


class ConfigurationError(ConfigError):
    """A pipeline's configuration is invalid; names the key, where it was set and the fix.

    ``problems`` holds each problem with its file and line when the error lists several.
    """

    def __init__(self, message: str, problems: Sequence[Problem] = ()) -> None:
        super().__init__(message)
        self.problems = tuple(problems)

    @classmethod
    def listing(cls, problems: Sequence[Problem]) -> ConfigurationError:
        """The error listing every one of ``problems``."""
        listed = "\n".join(f"  - {problem}" for problem in problems)
        return cls(
            f"the pipeline configuration has {len(problems)} problem(s):\n{listed}", problems
        )


class BlueprintError(ConfigError):
    """A blueprint failed verification; carries every problem found, not just the first."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        listed = "\n".join(f"  - {problem}" for problem in self.problems)
        super().__init__(f"the blueprint has {len(self.problems)} problem(s):\n{listed}")
