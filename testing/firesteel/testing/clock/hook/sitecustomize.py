"""Shift the wall clock by ``FIRESTEEL_CLOCK_OFFSET`` seconds (see :mod:`firesteel.testing.clock`).

Imported by the interpreter at start-up because its folder is on ``PYTHONPATH``;
a process without the variable keeps the real clock.
"""

import os
import time

_OFFSET = float(os.environ.get("FIRESTEEL_CLOCK_OFFSET") or 0.0)

if _OFFSET:
    _real_time, _real_time_ns = time.time, time.time_ns
    _OFFSET_NS = int(_OFFSET * 1_000_000_000)

    def _time() -> float:
        return _real_time() + _OFFSET

    def _time_ns() -> int:
        return _real_time_ns() + _OFFSET_NS

    time.time = _time
    time.time_ns = _time_ns
