"""Blueprint verification: every problem reported at once, each with its line and a fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from firesteel.pipelines import BlueprintError, load_blueprint, parse_blueprint, verify

GOOD = """\
blueprint {
  streamlets {
    readings = pipeline_streamlets.Ingress
    metrics = pipeline_streamlets.Metrics
    sink = pipeline_streamlets.Egress
  }
  topics {
    sensor-readings {
      producers = [readings.out]
      consumers = [metrics.in]
    }
    metrics {
      producers = [metrics.out]
      consumers = [sink.in]
    }
  }
}
"""


def test_a_good_blueprint_verifies_and_knows_its_topology() -> None:
    verified = verify(parse_blueprint(GOOD, "good.conf"))
    assert list(verified.streamlets) == ["readings", "metrics", "sink"]
    assert verified.topic_of("metrics", "in") == "sensor-readings"
    assert verified.topic_of("metrics", "out") == "metrics"
    assert [c.streamlet for c in verified.consumers["metrics"]] == ["sink"]


def test_a_topic_is_named_by_topic_name_or_topic_else_by_its_key() -> None:
    named = GOOD + (
        'blueprint.topics.sensor-readings.topic.name = "readings-v2"\n'
        'blueprint.topics.metrics.topic = "metrics-v2"\n'
    )
    topics = parse_blueprint(named).topics
    assert (topics["sensor-readings"].name, topics["metrics"].name) == ("readings-v2", "metrics-v2")
    assert parse_blueprint(GOOD).topics["metrics"].name == "metrics"


BAD = """\
blueprint {
  streamlets {
    readings = pipeline_streamlets.Ingress
    metrics = pipeline_streamlets.Metric
    Bad_Name = pipeline_streamlets.Egress
    strict = pipeline_streamlets.StrictMetrics
    nothing = pipeline_streamlets.NotAStreamlet
    gone = no_such_module.Streamlet
  }
  topics {
    sensor-readings {
      producers = [readings.outt]
      consumers = [strict.in, readings.out]
      consumer = [metrics.in]
    }
    again {
      producers = [readings.out]
      consumers = [reading.in]
    }
    "bad topic!" {
      producers = [readings.out]
    }
  }
}
"""


def test_every_problem_is_reported_in_one_run_with_line_and_suggestion() -> None:
    with pytest.raises(BlueprintError) as failure:
        verify(parse_blueprint(BAD, "bad.conf"))
    problems = [str(p) for p in failure.value.problems]
    expected = [
        "bad.conf:4: streamlet 'metrics': module 'pipeline_streamlets' has no class 'Metric' "
        "(did you mean 'Metrics'?)",
        "bad.conf:5: streamlet name 'Bad_Name' is invalid",
        "bad.conf:7: streamlet 'nothing': 'pipeline_streamlets.NotAStreamlet' is not a "
        "Streamlet subclass",
        "bad.conf:8: streamlet 'gone': cannot import module 'no_such_module'",
        "bad.conf:14: topic 'sensor-readings': unknown key 'consumer' (did you mean 'consumers'?)",
        "bad.conf:12: topic 'sensor-readings': streamlet 'readings' has no outlet 'outt' "
        "(did you mean 'out'?)",
        "bad.conf:13: topic 'sensor-readings': consumer 'readings.out' is an outlet; consumers "
        "must be inlets",
        "bad.conf:18: topic 'again': consumer 'reading.in' names unknown streamlet 'reading' "
        "(did you mean 'readings'?)",
        "bad.conf:20: topic 'bad topic!': name 'bad topic!' is not a valid Kafka topic name",
        "bad.conf:20: port readings.out is bound to 2 topics (again, bad topic!): bind it to one",
        "bad.conf:5: inlet Bad_Name.in is not connected",
    ]
    for text in expected:
        assert any(text in problem for problem in problems), (text, problems)
    assert str(failure.value).startswith(f"the blueprint has {len(problems)} problem(s)")


def test_schemas_on_a_topic_are_checked_by_avro_reader_writer_rules() -> None:
    compatible = """
blueprint {
  streamlets { old = pipeline_streamlets.Ingress, new = pipeline_streamlets.IngressV2,
               metrics = pipeline_streamlets.Metrics }
  topics { readings { producers = [new.out, old.out], consumers = [metrics.in] } }
}
"""
    verify(parse_blueprint(compatible))
    incompatible = """
blueprint {
  streamlets { old = pipeline_streamlets.Ingress, strict = pipeline_streamlets.StrictMetrics }
  topics { readings { producers = [old.out], consumers = [strict.in] } }
}
"""
    with pytest.raises(BlueprintError, match=r"strict.in cannot read what old.out writes.*unit"):
        verify(parse_blueprint(incompatible))


def test_json_ports_are_checked_through_their_avro_description() -> None:
    crossed = """
blueprint {
  streamlets { metrics = pipeline_streamlets.Metrics, strict = pipeline_streamlets.StrictEgress }
  topics {
    metrics-out { producers = [metrics.out], consumers = [strict.in] }
    unread { consumers = [metrics.in] }
  }
}
"""
    with pytest.raises(BlueprintError, match=r"strict.in cannot read what metrics.out writes"):
        verify(parse_blueprint(crossed))


def test_a_topic_written_as_avro_and_read_as_json_is_refused() -> None:
    crossed = """
blueprint {
  streamlets { readings = pipeline_streamlets.Ingress, json = pipeline_streamlets.JsonReadings }
  topics {
    readings {
      producers = [readings.out]
      consumers = [json.in]
    }
  }
}
"""
    with pytest.raises(BlueprintError) as failure:
        verify(parse_blueprint(crossed, "crossed.conf"))
    assert [str(p) for p in failure.value.problems] == [
        "crossed.conf:5: topic 'readings': json.in reads json but readings.out writes avro: "
        "give both ports the same codec"
    ]


def test_partitions_that_are_no_whole_number_are_a_problem_with_its_line() -> None:
    with pytest.raises(BlueprintError) as failure:
        verify(
            parse_blueprint(
                GOOD.replace(
                    "consumers = [sink.in]", "consumers = [sink.in]\n      partitions = three"
                ),
                "good.conf",
            )
        )
    assert [str(p) for p in failure.value.problems] == [
        "good.conf:15: topic 'metrics': partitions = 'three': expected a whole number of at "
        "least 1 (e.g. 3)"
    ]


def test_syntax_errors_and_missing_files_are_named(tmp_path: Path) -> None:
    broken = tmp_path / "broken.conf"
    broken.write_text("blueprint {\n  streamlets {\n    a = \n")
    with pytest.raises(BlueprintError, match=r"broken.conf.*not valid HOCON"):
        load_blueprint(broken)
    with pytest.raises(BlueprintError, match=r"missing.conf: cannot read the blueprint"):
        load_blueprint(tmp_path / "missing.conf")
    with pytest.raises(BlueprintError, match=r"no 'blueprint \{ ... \}' section"):
        parse_blueprint("pipeline { }")
