"""Entry point the harness runs a job script through: ``python -m firesteel.testing.launch``.

The harness starts the job in a new session, so its process group id equals
its PID, which is only known once the process exists. This launcher puts it
into ``FIRESTEEL_FAULT_PGID`` (read by :mod:`firesteel.testing.faults`, and
inherited by the Spark JVM the script starts) and then runs the script as
``__main__`` with the remaining arguments, or several scripts in one driver
(``--together``, see :mod:`firesteel.testing.together`).
"""

from __future__ import annotations

import os
import sys

from firesteel.testing.faults import PGID_ENV
from firesteel.testing.together import TOGETHER_FLAG, run_parts, run_script, split_parts


def main() -> None:
    """Run ``sys.argv[1]`` as a script with ``sys.argv[2:]`` as its arguments, or, after
    ``--together``, several named scripts in this one driver
    (:mod:`firesteel.testing.together`)."""
    if len(sys.argv) < 2:
        msg = (
            "usage: python -m firesteel.testing.launch <script.py> [args...]\n"
            "       python -m firesteel.testing.launch --together "
            "<name> <script.py> [args...] [--and <name> <script.py> [args...]]..."
        )
        raise SystemExit(msg)
    os.environ[PGID_ENV] = str(os.getpgid(0))
    if sys.argv[1] == TOGETHER_FLAG:
        run_parts(split_parts(sys.argv[2:]))
        return
    run_script(sys.argv[1], sys.argv[2:])


if __name__ == "__main__":
    main()
