"""Supervision: a dead streamlet is restarted with backoff, within bounds, and one that keeps
dying stops the pipeline naming it and its log.

The restart of a SIGKILLed streamlet with exact output is proven by
``test_pipeline_crash.py`` (its first run, twice); here a streamlet's process dies for
a real reason (its Spark driver's Java cannot start) on every start.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import time
from pathlib import Path

import pytest

from firesteel.pipelines import ConfigurationError, PipelineConfig, parse_blueprint, verify
from firesteel.pipelines.runner import LocalRunner
from firesteel.pipelines.supervision import RestartPolicy, Restarts

ALONE = """
blueprint {
  streamlets { readings = pipeline_streamlets.Ingress }
  topics { readings { producers = [readings.out] } }
}
"""


def test_restarts_back_off_and_are_bounded_within_their_window() -> None:
    policy = RestartPolicy(
        restarts=3,
        window=datetime.timedelta(minutes=10),
        backoff=datetime.timedelta(seconds=1),
        max_backoff=datetime.timedelta(seconds=3),
    )
    restarts = Restarts(policy)
    assert [restarts.after_death(t) for t in (0.0, 10.0, 20.0)] == [1.0, 2.0, 3.0]
    assert restarts.after_death(30.0) is None
    # The first restart left the window: one more is allowed, after the longest backoff.
    assert restarts.after_death(601.0) == 3.0
    assert restarts.total == 4
    off = Restarts(dataclasses.replace(policy, restarts=0))
    assert off.after_death(0.0) is None, "restarts = 0: the first death stops the pipeline"


def test_bad_supervision_settings_are_refused_at_once_with_suggestions() -> None:
    verified = verify(parse_blueprint(ALONE, "alone.conf"))
    with pytest.raises(ConfigurationError) as refused:
        PipelineConfig.load(
            verified,
            arguments=[
                "firesteel.supervision.restart = 2",
                "firesteel.supervision.backoff = soon",
                "firesteel.supervision.restarts = -1",
            ],
        )
    message = str(refused.value)
    assert "firesteel.supervision.restart: unknown key (did you mean 'restarts'?)" in message
    assert "firesteel.supervision.backoff: 'soon' is not a duration" in message
    assert "firesteel.supervision.restarts: -1 is not a whole number >= 0" in message
    config = PipelineConfig.load(verified, arguments=["firesteel.supervision.max-backoff = 1m"])
    assert config.supervision() == RestartPolicy(
        restarts=3,
        window=datetime.timedelta(minutes=10),
        backoff=datetime.timedelta(seconds=1),
        max_backoff=datetime.timedelta(minutes=1),
    )


def test_a_streamlet_that_keeps_dying_stops_the_pipeline_naming_it_and_its_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blueprint = tmp_path / "alone.conf"
    blueprint.write_text(ALONE)
    (tmp_path / "pipeline_streamlets.py").write_text(
        (Path(__file__).parent / "pipeline_streamlets.py").read_text()
    )
    no_java = {"JAVA_HOME": str(tmp_path / "no-java")}
    runner = LocalRunner(
        blueprint,
        tmp_path / "work",
        settings=[
            "firesteel.supervision.restarts = 2",
            "firesteel.supervision.backoff = 100ms",
            "firesteel.runner.jvm = per-streamlet",
        ],
        environment={"readings": no_java},
    )
    caplog.set_level(logging.INFO, logger="firesteel.pipelines.runner")
    started = time.monotonic()
    runner.start()
    try:
        assert runner.wait() == 1
    finally:
        runner.stop()
    assert time.monotonic() - started < 120
    assert runner.restarts["readings"].total == 2
    log = runner.log_path("readings")
    starts = [
        r.message for r in caplog.records if r.message.startswith("streamlet readings started")
    ]
    assert len(starts) == 3
    restarted = [r.message for r in caplog.records if "restart " in r.message]
    assert [m.split(": restart ")[1][:2] for m in restarted] == ["1 ", "2 "]
    assert all(str(log) in m for m in restarted)
    assert caplog.records[-1].levelno == logging.ERROR
    assert caplog.records[-1].message == (
        "streamlet readings exited with 1 after 2 restarts, more than "
        "firesteel.supervision.restarts = 2 within 600 s allows: stopping the pipeline; "
        f"see {log}"
    )
    assert log.read_text().count("no-java") >= 3
