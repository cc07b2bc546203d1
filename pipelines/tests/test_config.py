"""The configuration model: precedence, typed parameters, checkpoint defaults, masking."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
from test_blueprint import GOOD

from firesteel.cli.main import main as firesteel
from firesteel.pipelines import ConfigurationError, PipelineConfig, parse_blueprint, verify
from firesteel.pipelines.kafka import topic_partitions
from firesteel.pipelines.parameters import parse_duration, parse_memory_size

REQUIRED = "firesteel.streamlets.metrics.config-parameters.required-count=3"


def _config(*arguments: str, files: tuple[Path, ...] = (), extra: str = "") -> PipelineConfig:
    verified = verify(parse_blueprint(GOOD + extra, "good.conf"))
    return PipelineConfig.load(verified, files, [REQUIRED, *arguments])


def test_defaults_blueprint_files_then_arguments_each_win_over_the_one_before(
    tmp_path: Path,
) -> None:
    in_blueprint = """
firesteel.streamlets.readings.config-parameters { records-per-second = 20, sensor-prefix = "b-" }
firesteel.runtimes.spark.config { "spark.sql.shuffle.partitions" = 8 }
"""
    first = tmp_path / "first.conf"
    first.write_text(
        "firesteel.streamlets.readings.config-parameters.records-per-second = 30\n"
        'firesteel.streamlets.readings.config { "spark.sql.shuffle.partitions" = 3 }\n'
    )
    second = tmp_path / "second.conf"
    second.write_text("firesteel.streamlets.readings.config-parameters.records-per-second = 40\n")
    config = _config(
        "firesteel.streamlets.readings.config-parameters.sensor-prefix = a-",
        files=(first, second),
        extra=in_blueprint,
    )
    readings = config.streamlet("readings")
    assert readings.parameters == {"records-per-second": 40, "sensor-prefix": "a-"}
    assert readings.spark_conf == {"spark.sql.shuffle.partitions": 3}
    assert config.streamlet("sink").spark_conf == {"spark.sql.shuffle.partitions": 8}
    metrics = config.streamlet("metrics").parameters
    assert metrics["window"] == datetime.timedelta(minutes=1)
    assert metrics["buffer"] == 1024 * 1024
    assert metrics["required-count"] == 3


def test_checkpoint_defaults_are_cloudflows_mapped_to_spark() -> None:
    checkpointing = _config().streamlet("metrics").checkpointing
    assert checkpointing.enabled
    assert checkpointing.trigger == {"processingTime": "10000 milliseconds"}
    assert checkpointing.timeout == datetime.timedelta(seconds=60)
    assert checkpointing.retain_on_stop
    assert checkpointing.retained_batches == 100
    assert checkpointing.guarantee == "exactly-once"
    assert any("min-pause" in note for note in _config().streamlet("metrics").not_applied)

    flink = _config(
        "firesteel.runtimes.spark.checkpointing.execution.checkpointing.interval = 2s",
        "firesteel.streamlets.sink.checkpointing.execution.checkpointing.externalized-checkpoint-"
        "retention = DELETE_ON_CANCELLATION",
        "firesteel.streamlets.sink.checkpointing.default = off",
    )
    assert flink.streamlet("metrics").checkpointing.interval == datetime.timedelta(seconds=2)
    sink = flink.streamlet("sink").checkpointing
    assert not sink.retain_on_stop
    assert not sink.enabled
    assert sink.guarantee == "none"


def test_every_bad_key_and_value_is_refused_at_once_with_suggestions() -> None:
    with pytest.raises(ConfigurationError) as failure:
        _config(
            "firesteel.streamlets.metric.config-parameters.window = 5s",
            "firesteel.streamlets.readings.config-parameters.records-per-secnd = 5",
            "firesteel.streamlets.readings.config-parameters.sensor-prefix = BAD",
            "firesteel.streamlets.metrics.config-parameters.threshold = high",
            "firesteel.streamlets.sink.checkpointing.intervall = 5s",
            "firesteel.runtimes.spark.checkpointing.execution.checkpointing.unaligned = true",
            "firesteel.streamlts.x = 1",
            'firesteel.runtimes.spark.config { "spark.executor.memory" = 512m }',
        )
    message = str(failure.value)
    for text in (
        "firesteel.streamlets.metric: no streamlet 'metric' in the blueprint (did you mean "
        "'metrics'?)",
        "declares no parameter 'records-per-secnd' (did you mean 'records-per-second'?)",
        "streamlet 'readings': parameter 'sensor-prefix': 'BAD' does not match '[a-z]+-'",
        "streamlet 'metrics': parameter 'threshold': 'high' is not a number",
        "unknown checkpointing key 'intervall' (did you mean 'interval'?)",
        "'execution.checkpointing.unaligned' is a Flink setting with no meaning in Spark",
        "firesteel.streamlts: unknown key (did you mean 'streamlets'?)",
        "Spark setting 'spark.executor.memory' was read as a duration",
    ):
        assert text in message, (text, message)


def test_a_required_parameter_without_a_value_is_named() -> None:
    verified = verify(parse_blueprint(GOOD))
    with pytest.raises(ConfigurationError, match=r"'required-count' \(integer\) has no default"):
        PipelineConfig.load(verified)


def test_effective_configuration_masks_secrets() -> None:
    config = _config(
        'firesteel.kafka { bootstrap.servers = "127.0.0.1:9092", sasl.password = hush }',
        'firesteel.runtimes.spark.config { "spark.hadoop.fs.s3a.secret.key" = hush2 }',
    )
    shown = json.dumps(config.effective("metrics"), default=str)
    assert "hush" not in shown
    assert "127.0.0.1:9092" in shown
    assert '"spark.hadoop.fs.s3a.secret.key": "***"' in shown


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("10s", 10.0), ("500 ms", 0.5), ("2 minutes", 120.0), (250, 0.25), ("1h", 3600.0)],
)
def test_durations_use_hocon_units(raw: object, expected: float) -> None:
    assert parse_duration(raw).total_seconds() == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("512M", 512 * 1024**2), ("1 GiB", 1024**3), ("100k", 102400), ("2MB", 2_000_000), (42, 42)],
)
def test_memory_sizes_use_hocon_units(raw: object, expected: int) -> None:
    assert parse_memory_size(raw) == expected


def test_the_cli_verifies_and_prints_the_topology_or_every_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blueprint = tmp_path / "sensors.conf"
    blueprint.write_text(GOOD)
    verify = ["pipeline", "verify", str(blueprint), "--show", "metrics", REQUIRED]
    assert firesteel(verify) == 0
    out = capsys.readouterr().out
    assert "blueprint sensors: 3 streamlets" in out
    assert "<- in [avro] from topic sensor-readings" in out
    assert '"required-count": 3' in out
    assert firesteel(["pipeline", "verify", str(blueprint)]) == 1
    assert "'required-count' (integer) has no default" in capsys.readouterr().err


def test_a_pipeline_asking_more_than_its_streamlets_give_is_refused() -> None:
    assert _config("firesteel.guarantee = exactly-once").guarantee() == "exactly-once"
    with pytest.raises(ConfigurationError, match=r"must be exactly-once, but sink \(none\)"):
        _config(
            "firesteel.guarantee = exactly-once",
            "firesteel.streamlets.sink.checkpointing.default = off",
        )
    lowered = _config(
        "firesteel.guarantee = at-least-once",
        "firesteel.streamlets.metrics.checkpointing.mode = at-least-once",
    )
    assert lowered.guarantee() == "at-least-once"


def test_an_unquoted_memory_size_parameter_is_read_as_typesafe_config_reads_it(
    tmp_path: Path,
) -> None:
    conf = tmp_path / "sizes.conf"
    conf.write_text("firesteel.streamlets.metrics.config-parameters {\n  buffer = 512m\n}\n")
    assert _config(files=(conf,)).streamlet("metrics").parameters["buffer"] == 512 * 1024**2
    in_argument = _config("firesteel.streamlets.metrics.config-parameters.buffer = 64m")
    assert in_argument.streamlet("metrics").parameters["buffer"] == 64 * 1024**2
    conf.write_text("firesteel.streamlets.metrics.config-parameters {\n  buffer = 3h\n}\n")
    with pytest.raises(ConfigurationError) as failure:
        _config(files=(conf,))
    assert [str(p) for p in failure.value.problems] == [
        f"{conf}:2: streamlet 'metrics': parameter 'buffer': '3h' is not a memory size "
        "(e.g. 512M, 1 GiB, 100k)"
    ]


def test_a_mistake_in_a_setting_every_streamlet_shares_is_reported_once() -> None:
    with pytest.raises(ConfigurationError) as failure:
        _config(
            'firesteel.runtimes.spark.config { "spark.executor.memory" = 512m }',
            "firesteel.runtimes.spark.checkpointing.mode = twice",
        )
    assert [p.message for p in failure.value.problems] == [
        "firesteel.runtimes.spark.config.spark.executor.memory: Spark setting "
        "'spark.executor.memory' was read as a duration (relativedelta(hours=+8, minutes=+32)); "
        'quote its value (e.g. "512m") so Spark gets it as written',
        "firesteel.runtimes.spark.checkpointing.mode = 'twice': use exactly-once or at-least-once",
    ]


def test_an_argument_may_quote_a_path_segment_holding_dots() -> None:
    config = _config('firesteel.runtimes.spark.config."spark.sql.shuffle.partitions"=3')
    assert config.streamlet("sink").spark_conf == {"spark.sql.shuffle.partitions": 3}
    with pytest.raises(ConfigurationError) as failure:
        _config('firesteel.runtimes.spark.config."spark.sql.shuffle.partitions = 3')
    (problem,) = failure.value.problems
    assert str(problem).startswith(
        "argument 'firesteel.runtimes.spark.config.\"spark.sql.shuffle.partitions = 3': "
        "not valid HOCON at column"
    )
    assert "\n" not in str(problem)
    assert len(str(problem)) < 300
    # A long unquoted run before an unclosed quote: the path pattern once tried every way of
    # splitting it (17 s at 40 characters, doubling with each one more: this one never ends).
    with pytest.raises(ConfigurationError, match="not valid HOCON"):
        _config(f'firesteel.runtimes.spark.config.{"x" * 80}."a = 3')


def test_every_configuration_problem_has_its_file_and_line(tmp_path: Path) -> None:
    conf = tmp_path / "prod.conf"
    conf.write_text(
        "firesteel {\n"
        "  streamlets.metrics {\n"
        "    config-parameters {\n"
        "      threshold = high\n"
        "      windoww = 5s\n"
        "    }\n"
        "    checkpointing.intervall = 5s\n"
        "  }\n"
        "}\n"
    )
    in_blueprint = "firesteel.runtimes.spark.checkpointing.timeout = soon\n"
    with pytest.raises(ConfigurationError) as failure:
        _config("firesteel.supervision.restarts = -1", files=(conf,), extra=in_blueprint)
    problems = [str(p) for p in failure.value.problems]
    for text in (
        f"{conf}:5: firesteel.streamlets.metrics.config-parameters.windoww: streamlet "
        "'metrics' declares no parameter 'windoww' (did you mean 'window'?)",
        f"{conf}:4: streamlet 'metrics': parameter 'threshold': 'high' is not a number",
        f"{conf}:7: firesteel.streamlets.metrics.checkpointing.intervall: unknown "
        "checkpointing key 'intervall'",
        "good.conf:18: firesteel.runtimes.spark.checkpointing.timeout = 'soon': 'soon' is "
        "not a duration",
        "argument 'firesteel.supervision.restarts = -1': firesteel.supervision.restarts: -1 "
        "is not a whole number >= 0",
    ):
        assert any(problem.startswith(text) for problem in problems), (text, problems)
    assert len(problems) == 5, problems


def test_blueprint_and_configuration_problems_come_in_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blueprint = tmp_path / "sensors.conf"
    blueprint.write_text(GOOD.replace("pipeline_streamlets.Egress", "pipeline_streamlets.Egres"))
    assert firesteel(["pipeline", "verify", str(blueprint), f"{REQUIRED}x"]) == 1
    err = capsys.readouterr().err
    assert f"{blueprint}:5: streamlet 'sink': module 'pipeline_streamlets' has no class" in err
    assert f"argument '{REQUIRED}x': streamlet 'metrics': parameter 'required-count'" in err


def test_the_readmes_blueprint_and_parameter_are_the_shipped_examples(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "pipelines" / "sensors"
    monkeypatch.syspath_prepend(str(example))
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    hocon = readme.split("```hocon\n", 1)[1].split("```", 1)[0]
    verified = verify(parse_blueprint(hocon, "README.md"))
    config = PipelineConfig.load(verified, [example / "local.conf"])
    assert config.streamlet("store").parameters == {"output-dir": "sensor-metrics"}


def test_a_quoted_memory_size_parameter_is_read_as_it_always_was(tmp_path: Path) -> None:
    conf = tmp_path / "sizes.conf"
    conf.write_text('firesteel.streamlets.metrics.config-parameters { buffer = "512m" }\n')
    assert _config(files=(conf,)).streamlet("metrics").parameters["buffer"] == 512 * 1024**2


def test_parallelism_and_the_runner_mode_are_checked_with_their_file_and_line(
    tmp_path: Path,
) -> None:
    conf = tmp_path / "scale.conf"
    conf.write_text(
        "firesteel {\n"
        "  streamlets.metrics.parallelism = three\n"
        "  streamlets.readings.parallelism = 0\n"
        '  streamlets.sink.config { "spark.driver.memory" = "2g" }\n'
        "  runner.jvm = shard\n"
        "}\n"
    )
    with pytest.raises(ConfigurationError) as failure:
        _config(files=(conf,))
    problems = [str(p) for p in failure.value.problems]
    for text in (
        f"{conf}:2: firesteel.streamlets.metrics.parallelism: 'three' is not a whole number >= 1",
        f"{conf}:3: firesteel.streamlets.readings.parallelism: 0 is not a whole number >= 1",
        f"{conf}:5: firesteel.runner.jvm: 'shard' is not one of shared, per-streamlet "
        "(did you mean 'shared'?)",
    ):
        assert any(problem.startswith(text) for problem in problems), (text, problems)
    assert len(problems) == 3, problems
    # In one application a setting only the application takes cannot differ by streamlet.
    conf.write_text('firesteel.streamlets.sink.config { "spark.driver.memory" = "2g" }\n')
    with pytest.raises(ConfigurationError) as shared:
        _config(files=(conf,))
    assert [str(p) for p in shared.value.problems] == [
        f"{conf}:1: firesteel.streamlets.sink.config.spark.driver.memory: a setting of the Spark "
        "application, which every streamlet shares with firesteel.runner.jvm = shared; set it "
        "once in firesteel.runtimes.spark.config, or give each streamlet its own JVM with "
        "firesteel.runner.jvm = per-streamlet"
    ]
    own = _config("firesteel.runner.jvm = per-streamlet", files=(conf,))
    assert own.streamlet("sink").spark_conf["spark.driver.memory"] == "2g"


def test_parallelism_sets_the_streamlets_partitions_and_its_topics_partitions() -> None:
    config = _config(
        "firesteel.streamlets.metrics.parallelism = 4",
        "firesteel.streamlets.sink.parallelism = 6",
        'firesteel.streamlets.sink.config { "spark.sql.shuffle.partitions" = 5 }',
        'firesteel.runtimes.spark.config { "spark.sql.shuffle.partitions" = 2 }',
    )
    assert config.streamlet("metrics").spark_conf["spark.sql.shuffle.partitions"] == 4
    assert config.streamlet("sink").spark_conf["spark.sql.shuffle.partitions"] == 5
    assert config.streamlet("readings").spark_conf["spark.sql.shuffle.partitions"] == 2
    assert config.effective("metrics")["parallelism"] == 4
    partitions = {
        key: topic_partitions(config.verified, config, key)
        for key in config.verified.blueprint.topics
    }
    assert partitions == {"sensor-readings": 4, "metrics": 6}


def test_the_application_keeps_one_idle_python_worker_per_kind_unless_the_streamlets_say() -> None:
    from firesteel.pipelines.host import IDLE_WORKERS, application_conf

    names = list(verify(parse_blueprint(GOOD, "good.conf")).streamlets)
    [(key, kept)] = IDLE_WORKERS.items()
    assert application_conf(_config(), names)[key] == kept == "1"
    every = f'firesteel.runtimes.spark.config {{ "{key}" = 4 }}'
    assert application_conf(_config(extra=every), names)[key] == "4"


def test_task_workers_fork_from_firesteels_daemon_unless_the_streamlets_say() -> None:
    from firesteel.core import WORKER_DAEMON
    from firesteel.pipelines.host import application_conf

    names = list(verify(parse_blueprint(GOOD, "good.conf")).streamlets)
    [(key, daemon)] = WORKER_DAEMON.items()
    assert application_conf(_config(), names)[key] == daemon == "firesteel.core.spark.daemon"
    every = f'firesteel.runtimes.spark.config {{ "{key}" = pyspark.daemon }}'
    assert application_conf(_config(extra=every), names)[key] == "pyspark.daemon"


def test_the_application_jvm_starts_small_unless_the_streamlets_say() -> None:
    from firesteel.core import LOCAL_PROFILE
    from firesteel.pipelines.host import application_conf

    names = list(verify(parse_blueprint(GOOD, "good.conf")).streamlets)
    conf = application_conf(_config(), names)
    assert conf["spark.driver.memory"] == LOCAL_PROFILE["spark.driver.memory"] == "512m"
    assert "-XX:+UseSerialGC" in conf["spark.driver.extraJavaOptions"]
    bigger = 'firesteel.runtimes.spark.config { "spark.driver.memory" = "2g" }'
    assert application_conf(_config(extra=bigger), names)["spark.driver.memory"] == "2g"
