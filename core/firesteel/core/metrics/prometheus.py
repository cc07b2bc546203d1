"""A query's batch records as Prometheus metrics, read from its checkpoint at every scrape.

The exporter reads the checkpoint, not the running query, so it sits beside any
number of queries (in the job's driver or as a process of its own,
``firesteel status --prometheus PORT``), survives their restarts, and shows a
stopped query's last state. Every metric is labelled ``query`` (the name it was
given; ``firesteel status`` gives the checkpoint location) and ``sink`` (the sink
id); counters count committed work only (see :mod:`firesteel.core.metrics.history`)::

    firesteel_sink_batches_total            committed batches
    firesteel_sink_input_rows_total         rows handed to the sink
    firesteel_sink_input_bytes_total        their Arrow bytes
    firesteel_sink_<counter>_total          each counter the sink's tasks add
    firesteel_sink_last_batch               the last committed batch id
    firesteel_sink_last_commit_timestamp_seconds
    firesteel_sink_last_write_seconds       the last batch's slowest task in the sink
    firesteel_sink_last_commit_seconds      the last batch's commit
    firesteel_sink_last_<maximum>           the largest of a maximum the last batch's tasks
                                            kept (oldest_record_age_seconds: Kafka)
    firesteel_batch_phase_seconds{phase}    histogram of each committed batch's seconds
                                            per phase: read, process, write (the slowest
                                            task's), commit, commit_<part> (send, record,
                                            publish...), snapshot (the slowest operator task)
    firesteel_state_bytes{operator}         the last batch's state, as its backend knows it
    firesteel_state_entries{operator}       values held (heap and filesystem backends)
    firesteel_state_entries_estimate{operator}  RocksDB's estimate of its entries (no scan)
    firesteel_state_last_snapshot_bytes{operator}   bytes the last batch's snapshot wrote
    firesteel_source_lag{partition}         committed records behind the log end when
                                            the source last planned a batch (Kafka)
    firesteel_source_bad_records_total{policy}  bad records skipped / quarantined (Kafka)

Needs ``prometheus-client`` (``pip install 'firesteel[metrics]'``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from firesteel.core.errors import MissingDependencyError
from firesteel.core.metrics.history import BUCKETS, read_history
from firesteel.core.metrics.sources import BAD_RECORDS, read_source_progress

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

__all__ = ["CheckpointCollector", "serve_prometheus"]

_PREFIX = "firesteel_sink_"
_PACKAGE, _DISTRIBUTION = "prometheus-client", "'firesteel[metrics]'"


def _metric_name(counter: str) -> str:
    return _PREFIX + re.sub(r"[^a-zA-Z0-9_]", "_", counter) + "_total"


class CheckpointCollector:
    """A ``prometheus_client`` collector of the queries ``{name: checkpoint location}``."""

    def __init__(self, queries: Mapping[str, str]) -> None:
        self.queries = dict(queries)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        labels = ["query", "sink"]
        counters: dict[str, Any] = {}
        gauges = {
            name: GaugeMetricFamily(_PREFIX + name, text, labels=labels)
            for name, text in (
                ("last_batch", "The last committed batch id."),
                ("last_commit_timestamp_seconds", "When the last batch committed."),
                ("last_write_seconds", "The last batch's slowest task in the sink."),
                ("last_commit_seconds", "The last batch's commit."),
            )
        }
        phases = HistogramMetricFamily(
            "firesteel_batch_phase_seconds",
            "Seconds per phase of each committed batch.",
            labels=[*labels, "phase"],
        )
        state = {
            figure: GaugeMetricFamily(name, text, labels=[*labels, "operator"])
            for figure, name, text in (
                ("state_bytes", "firesteel_state_bytes", "The state's bytes at the last batch."),
                ("state_entries", "firesteel_state_entries", "Values held at the last batch."),
                (
                    "state_entries_estimate",
                    "firesteel_state_entries_estimate",
                    "RocksDB's estimate of the entries held at the last batch "
                    "(rocksdb.estimate-num-keys: an estimate, not a count; entries overwritten "
                    "or deleted since the last compaction are in it).",
                ),
                (
                    "snapshot_bytes",
                    "firesteel_state_last_snapshot_bytes",
                    "Bytes the last batch's snapshot wrote.",
                ),
            )
        }
        for query, checkpoint in self.queries.items():
            for sink, records in read_history(checkpoint, last=1).items():
                if not records:
                    continue
                latest = records[-1]
                values = [query, sink]
                for total, value in latest.totals.items():
                    name = _metric_name(total)
                    if name not in counters:
                        text = f"Committed {total.replace('_', ' ')}, summed over batches."
                        counters[name] = CounterMetricFamily(name, text, labels=labels)
                    counters[name].add_metric(values, value)
                gauges["last_batch"].add_metric(values, latest.batch)
                gauges["last_commit_timestamp_seconds"].add_metric(values, latest.committed_at)
                gauges["last_write_seconds"].add_metric(values, latest.write_seconds)
                gauges["last_commit_seconds"].add_metric(values, latest.commit_seconds)
                for figure, value in sorted(latest.maxima.items()):
                    name = f"last_{figure}"
                    if name not in gauges:
                        text = f"The largest {figure.replace('_', ' ')} of the last batch's tasks."
                        gauges[name] = GaugeMetricFamily(_PREFIX + name, text, labels=labels)
                    gauges[name].add_metric(values, value)
                for phase, histogram in sorted(latest.histograms.items()):
                    bounds = [*(str(b) for b in BUCKETS), "+Inf"]
                    buckets = list(zip(bounds, histogram["buckets"], strict=True))
                    phases.add_metric([*values, phase], buckets, histogram["sum"])
                for operator, figures in sorted(latest.operators.items()):
                    for figure, gauge in state.items():
                        if figure in figures:
                            gauge.add_metric([*values, operator], figures[figure])
        lag = GaugeMetricFamily(
            "firesteel_source_lag",
            "Committed records behind the log end when the source last planned a batch.",
            labels=["query", "source", "partition"],
        )
        bad = CounterMetricFamily(
            "firesteel_source_bad_records",
            "Bad records the source skipped or quarantined (sent to its dead letters).",
            labels=["query", "source", "policy"],
        )
        for query, checkpoint in self.queries.items():
            for source, progress in read_source_progress(checkpoint).items():
                for partition, behind in sorted(progress.get("lag", {}).items()):
                    lag.add_metric([query, source, partition], behind)
                for policy, count in sorted(progress.get(BAD_RECORDS, {}).items()):
                    bad.add_metric([query, source, policy], count)
        yield from counters.values()
        yield from gauges.values()
        yield phases
        yield from state.values()
        yield lag
        yield bad


def serve_prometheus(
    port: int, queries: Mapping[str, str], address: str = "127.0.0.1"
) -> WSGIServer:
    """Serve ``/metrics`` of ``queries`` ``{name: checkpoint}`` on ``address:port`` from a
    daemon thread; returns the server (``shutdown()`` stops it)."""
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError as exc:
        raise MissingDependencyError(_PACKAGE, _DISTRIBUTION) from exc
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CheckpointCollector(queries))
    server, _thread = start_http_server(port, address, registry=registry)
    return server
