"""A query's metrics: measured in its write tasks, recorded per committed batch beside its
checkpoint, read by ``firesteel status`` and exported to Prometheus.

- :mod:`firesteel.core.metrics.task`: what a write task measures, and the counters a
  connector adds through :func:`task_metrics`;
- :mod:`firesteel.core.metrics.history`: the per-batch record of committed work;
- :mod:`firesteel.core.metrics.prometheus`: the records as Prometheus metrics.
"""

from firesteel.core.metrics.history import BatchRecord, read_history
from firesteel.core.metrics.task import TaskMetrics, task_metrics

__all__ = ["BatchRecord", "TaskMetrics", "read_history", "task_metrics"]
