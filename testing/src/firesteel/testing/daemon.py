"""The worker daemon of the suite's sessions and the harness's jobs: firesteel's own
(:mod:`firesteel.core.spark.daemon`, which users opt into). The crash tests restart
their jobs and kill workers, so workers are forked afresh all the time; measured on
the S3 shared-driver crash test (2 cores), the task workers used 32 s of CPU instead
of 40 with it."""

from __future__ import annotations

from collections.abc import Mapping

from firesteel.core import WORKER_DAEMON

DAEMON_CONFIG: Mapping[str, str] = WORKER_DAEMON
"""The session setting that makes Spark fork the workers from that daemon."""
