"""Streamlets of one application start, and when they fail together restart, one after the
other, upstream first.

Two streamlets, hosted in the suite's session as ``firesteel.runner.jvm = shared``
hosts them, are started by the host: it starts the first, holds the second until
the first has run its first batch, then starts it. Then both fail in the same
step (a file they check in every batch says so) and are due for their restart at
the same moment, and are restarted the same way. Observed in the host's log, in
order: no timing is asserted.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from firesteel.pipelines import parse_blueprint, verify
from firesteel.pipelines.host import Host, start_order
from firesteel.pipelines.runner import load

TIMEOUT_S = 240.0

STREAMLETS = '''
"""A streamlet whose every batch fails while its poison file exists."""

import os
from pathlib import Path

from firesteel.pipelines import (
    AvroCodec,
    Outlet,
    Streamlet,
    StreamletLogic,
    StreamletShape,
    StringParameter,
)

RECORD = {"type": "record", "name": "Seq", "fields": [{"name": "seq", "type": "long"}]}


class Poisonable(Streamlet):
    shape = StreamletShape(outlets=[Outlet("out", AvroCodec(RECORD))])
    parameters = (
        StringParameter("input-dir", "folder of JSON-lines records"),
        StringParameter("poison", "a file whose presence fails every batch"),
    )

    def create_logic(self, context):
        return PoisonableLogic(context)


class PoisonableLogic(StreamletLogic):
    """Spark's own JSON source and a batch function on the driver: a failure and a restart
    start no Python worker, so the test pays for none."""

    def run(self):
        poison = self.context.config["poison"]

        def checked(batch, batch_id):
            if os.path.exists(poison):
                raise RuntimeError(f"batch {batch_id} poisoned by {poison}")

        query = (
            self.context.spark.readStream.schema("seq long")
            .json(str(Path(self.context.config["input-dir"])))
            .writeStream.queryName(self.context.query_name())
            .option("checkpointLocation", self.context.checkpoint_location())
            .foreachBatch(checked)
            .trigger(**self.context.trigger)
            .start()
        )
        return [query]
'''

BLUEPRINT = """
blueprint {
  streamlets {
    first = poisonable.Poisonable
    second = poisonable.Poisonable
  }
  topics {
    first-out { producers = [first.out] }
    second-out { producers = [second.out] }
  }
}
"""


def _write(folder: Path, name: str, seqs: range) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    hidden = folder / f".{name}"
    hidden.write_text("".join(json.dumps({"seq": s}) + "\n" for s in seqs))
    hidden.rename(folder / name)


def _until(host: Host | None, done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not done():
        if host is not None:
            assert host.step(time.monotonic()) is None, "a streamlet stopped the pipeline"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_streamlets_start_then_fail_together_and_restart_one_after_the_other(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "poisonable.py").write_text(STREAMLETS)
    (tmp_path / "blueprint.conf").write_text(BLUEPRINT)
    poison = tmp_path / "poison"
    names = ("first", "second")
    settings = [
        "firesteel.runtimes.spark.checkpointing.interval = 500ms",
        "firesteel.supervision.backoff = 1s",
    ]
    for name in names:
        parameters = f"firesteel.streamlets.{name}.config-parameters"
        settings += [f"{parameters}.input-dir = {tmp_path / name}"]
        settings += [f"{parameters}.poison = {poison}"]
        _write(tmp_path / name, "records.json", range(3))
    verified, config = load(tmp_path / "blueprint.conf", [], settings)
    caplog.set_level(logging.INFO, logger="firesteel.pipelines.host")

    host = Host(spark, verified, config, tmp_path / "work")
    try:
        hosted = [host.streamlets[name] for name in names]
        host.begin(time.monotonic())
        _until(host, lambda: all(h.due is None and h.started_all() for h in hosted), "starts")
        started = _lines(caplog)
        caplog.clear()

        # Both fail in their next batch; the host sees both failures in one step, so both
        # are due for their restart at the same moment.
        poison.touch()
        _write(tmp_path / "first", "more.json", range(3, 6))
        _write(tmp_path / "second", "more.json", range(3, 6))

        def failed() -> bool:
            return all(not q.isActive and q.exception() for h in hosted for q in h.queries)

        _until(None, failed, "both streamlets to fail")
        assert host.step(time.monotonic()) is None
        assert hosted[0].due == hosted[1].due is not None
        poison.unlink()
        caplog.clear()
        _until(
            host,
            lambda: all(h.due is None and h.started_all() for h in hosted),
            "both restarts",
        )
        restarted = _lines(caplog)
    finally:
        host.stop()

    for lines in (started, restarted):
        order = [
            _first_line(lines, "streamlet first running 1 queries"),
            _first_line(lines, "streamlet second: start due, held until streamlet first"),
            _first_line(lines, "streamlet first: started, ran its first batch"),
            _first_line(lines, "streamlet second running 1 queries"),
        ]
        assert order == sorted(order), lines


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "firesteel.pipelines.host"]


def _first_line(lines: list[str], text: str) -> int:
    found = [i for i, line in enumerate(lines) if line.startswith(text)]
    assert found, f"no line starting {text!r} in {lines}"
    return found[0]


def test_streamlets_start_upstream_first_and_in_blueprint_order_around_a_cycle() -> None:
    chain = """
blueprint {
  streamlets {
    sink = pipeline_streamlets.Egress
    metrics = pipeline_streamlets.Metrics
    readings = pipeline_streamlets.Ingress
    relay = pipeline_streamlets.Relay
  }
  topics {
    sensor-readings { producers = [readings.out], consumers = [metrics.in, relay.in] }
    metrics { producers = [metrics.out], consumers = [sink.in] }
  }
}
"""
    assert start_order(verify(parse_blueprint(chain))) == ["readings", "metrics", "relay", "sink"]
    cycle = """
blueprint {
  streamlets { b = pipeline_streamlets.Relay, a = pipeline_streamlets.Relay }
  topics {
    ab { producers = [a.out], consumers = [b.in] }
    ba { producers = [b.out], consumers = [a.in] }
  }
}
"""
    assert start_order(verify(parse_blueprint(cycle))) == ["b", "a"]
