"""The Kafka crash-test jobs the test suite and the Kafka soak command run.

``map_job`` (Kafka -> map -> Kafka, at-least-once or exactly-once) and
``state_job`` (Kafka -> keyed rank per key -> Kafka exactly-once) read
sequence-numbered values, so their output can be counted.
"""

from __future__ import annotations

from pathlib import Path


def script(name: str) -> Path:
    """The path of job ``name`` (e.g. ``"map_job"``) for :meth:`CrashHarness.run`."""
    return Path(__file__).parent / f"{name}.py"
