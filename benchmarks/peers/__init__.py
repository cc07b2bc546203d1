"""The ``peers`` group's parts: each peer's virtual environment, the measured job process,
and the job scripts (one per side) that the group launches as subprocesses."""
