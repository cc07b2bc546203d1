"""Entry point the harness runs a job script through: ``python -m firesteel.testing.launch``.

The harness starts the job in a new session, so its process group id equals
its PID, which is only known once the process exists. This launcher puts it
into ``FIRESTEEL_FAULT_PGID`` (read by :mod:`firesteel.core.faults`, and
inherited by the Spark JVM the script starts) and then runs the script as
``__main__`` with the remaining arguments.
"""

from __future__ import annotations

import os
import runpy
import sys

from firesteel.core.faults import PGID_ENV


def main() -> None:
    """Run ``sys.argv[1]`` as a script with ``sys.argv[2:]`` as its arguments."""
    if len(sys.argv) < 2:
        msg = "usage: python -m firesteel.testing.launch <script.py> [args...]"
        raise SystemExit(msg)
    os.environ[PGID_ENV] = str(os.getpgid(0))
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    # As `python script.py` would: the script's folder comes first on the path.
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
