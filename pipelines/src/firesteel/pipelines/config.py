"""One configuration model for a pipeline: defaults < blueprint < ``--conf`` files < ``key=value``.

Every layer is HOCON with the same keys, all under ``firesteel``; a later layer
wins key by key (files in the order given, then arguments in order)::

    firesteel {
      runtimes.spark {
        config { "spark.sql.shuffle.partitions" = 4 }   # every streamlet's SparkSession
        checkpointing { interval = 5s }                   # every streamlet
      }
      streamlets.metrics {
        config-parameters { window-minutes = 10 }         # one streamlet's parameters
        config { "spark.executor.memory" = 2g }           # its SparkSession
        checkpointing { interval = 1s }                   # its queries
      }
      kafka { bootstrap.servers = "127.0.0.1:9092" }      # topics on Kafka (else local topics)
      supervision { restarts = 3 }                        # restarts of a dead streamlet
    }

``supervision``: how the runner restarts a streamlet whose process died
(:mod:`firesteel.pipelines.supervision`).

Checkpointing, with Cloudflow's Flink-runtime defaults and what each means in Spark:

==========================  =========  ==============================================
key (Flink spelling)         default    in Spark / firesteel
==========================  =========  ==============================================
``default`` (on/off)         on         off: queries use a temporary checkpoint deleted
                                        on stop, so a restart starts over and the
                                        streamlet's guarantee is none
``interval``                 10s        ``trigger(processingTime=...)`` of its queries
(``execution.checkpointing.interval``)
``min-pause``                500ms      no Spark meaning: a processing-time trigger
(``...min-pause``)                      starts an overrunning query's next batch at
                                        once; accepted, listed as not applied
``timeout`` (``...timeout``) 60s        ``transaction.timeout.ms`` of exactly-once Kafka
                                        outlets: a batch not committed by then aborts.
                                        Cloudflow's docs say 10 minutes, its code sets
                                        60 s; 60 s keeps broker transactions short
                                        (no hour-long broker timeout needed)
``max-concurrent``           1          Spark runs one batch at a time per query: 1 is
(``...max-concurrent-checkpoints``)     the only value
``retain-on-stop``           true       Spark keeps a stopped query's checkpoint;
(``...externalized-checkpoint-retention``) false deletes it after a clean stop
``retained-batches``         100        ``spark.sql.streaming.minBatchesToRetain``
(``state.checkpoints.num-retained``)
``mode`` (``...mode``)       exactly-once  the outlets' ``guarantee``
==========================  =========  ==============================================

Other Flink keys (``execution.*``, ``state.*``, ``taskmanager.*``, ``jobmanager.*``,
``pipeline.*``) have no Spark meaning and are refused, naming the key, rather
than silently ignored; a misspelled key is refused with a suggestion.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyhocon import ConfigFactory, ConfigTree
from pyhocon.exceptions import ConfigException
from pyparsing import ParseBaseException

from firesteel.pipelines.errors import ConfigurationError, did_you_mean
from firesteel.pipelines.parameters import parse_duration
from firesteel.pipelines.supervision import RestartPolicy, restart_policy
from firesteel.pipelines.verify import VerifiedBlueprint

ROOT_KEYS = (
    "streamlets",
    "runtimes",
    "kafka",
    "blueprint-name",
    "guarantee",
    "supervision",
)
GUARANTEES = ("none", "at-least-once", "exactly-once")
"""Weakest first: a pipeline gives the weakest of its streamlets' guarantees."""
STREAMLET_KEYS = ("config-parameters", "config", "checkpointing")
RUNTIME_KEYS = ("config", "checkpointing")

CHECKPOINT_DEFAULTS: dict[str, Any] = {
    "default": "on",
    "interval": "10s",
    "min-pause": "500ms",
    "timeout": "60s",
    "max-concurrent": 1,
    "retain-on-stop": True,
    "retained-batches": 100,
    "mode": "exactly-once",
}
FLINK_SPELLINGS = {
    "execution.checkpointing.interval": "interval",
    "execution.checkpointing.min-pause": "min-pause",
    "execution.checkpointing.timeout": "timeout",
    "execution.checkpointing.max-concurrent-checkpoints": "max-concurrent",
    "execution.checkpointing.externalized-checkpoint-retention": "retain-on-stop",
    "execution.checkpointing.mode": "mode",
    "state.checkpoints.num-retained": "retained-batches",
}
FLINK_PREFIXES = ("execution.", "state.", "taskmanager.", "jobmanager.", "pipeline.")
SECRET_WORDS = ("password", "secret", "token", "credential", "jaas", "key")


@dataclass(frozen=True)
class Checkpointing:
    """A streamlet's checkpointing, resolved (see the module docs for each field's meaning)."""

    enabled: bool
    interval: datetime.timedelta
    min_pause: datetime.timedelta
    timeout: datetime.timedelta
    retain_on_stop: bool
    retained_batches: int
    guarantee: str

    @property
    def trigger(self) -> dict[str, str]:
        """Keyword arguments of ``DataStreamWriter.trigger``."""
        return {"processingTime": f"{int(self.interval.total_seconds() * 1000)} milliseconds"}


@dataclass(frozen=True)
class StreamletConfig:
    """Everything configured for one streamlet."""

    name: str
    parameters: dict[str, Any]
    spark_conf: dict[str, str]
    checkpointing: Checkpointing
    not_applied: tuple[str, ...] = field(default=())
    """Settings accepted but without effect in Spark, each with the reason."""


class PipelineConfig:
    """The merged layers of one pipeline's configuration (see the module docs)."""

    def __init__(self, verified: VerifiedBlueprint, tree: ConfigTree) -> None:
        self.verified = verified
        self.tree = tree

    @classmethod
    def load(
        cls,
        verified: VerifiedBlueprint,
        files: Sequence[str | Path] = (),
        arguments: Sequence[str] = (),
    ) -> PipelineConfig:
        """Merge the blueprint's ``firesteel`` section, ``files``, then ``key=value`` arguments."""
        layers = [verified.blueprint.config]
        layers.extend(_parse(Path(path).read_text(), str(path)) for path in files)
        for argument in arguments:
            key, separator, value = argument.partition("=")
            if not separator or not key.strip():
                msg = f"argument {argument!r}: expected key=value"
                raise ConfigurationError(msg)
            layers.append(_parse(f"{key.strip()} = {value}", f"argument {argument!r}"))
        merged = ConfigTree()
        for layer in layers:
            section = layer.get("firesteel", None)
            if isinstance(section, ConfigTree):
                merged = ConfigTree.merge_configs(merged, section)
        config = cls(verified, merged)
        config.check()
        return config

    def check(self) -> None:
        """Refuse unknown keys (with suggestions) and invalid values, all problems at once."""
        problems: list[str] = []
        _unknown(self.tree, ROOT_KEYS, "firesteel", problems)
        streamlets = _child(self.tree, "streamlets")
        known = list(self.verified.streamlets)
        for name in _keys(streamlets):
            if name not in known:
                problems.append(
                    f"firesteel.streamlets.{name}: no streamlet {name!r} in the blueprint"
                    f"{did_you_mean(name, known)}"
                )
                continue
            scope = _child(streamlets, name)
            _unknown(scope, STREAMLET_KEYS, f"firesteel.streamlets.{name}", problems)
            declared = [p.key for p in self.verified.streamlets[name].parameters]
            parameters = _child(scope, "config-parameters")
            for key in _keys(parameters):
                if key not in declared:
                    problems.append(
                        f"firesteel.streamlets.{name}.config-parameters.{key}: streamlet "
                        f"{name!r} declares no parameter {key!r}{did_you_mean(key, declared)}"
                        f" (it declares: {', '.join(declared) or 'none'})"
                    )
        _unknown(_child(self.tree, "runtimes"), ("spark",), "firesteel.runtimes", problems)
        runtime = _child(self.tree, "runtimes", "spark")
        _unknown(runtime, RUNTIME_KEYS, "firesteel.runtimes.spark", problems)
        resolved = {}
        for name in self.verified.streamlets:
            config, found = self._resolve(name)
            problems.extend(found)
            if config is not None:
                resolved[name] = config.checkpointing.guarantee
        problems.extend(self._guarantee_problems(resolved))
        problems.extend(restart_policy(_flatten(_child(self.tree, "supervision")))[1])
        problems = list(dict.fromkeys(problems))
        if problems:
            listed = "\n".join(f"  - {p}" for p in problems)
            msg = f"the pipeline configuration has {len(problems)} problem(s):\n{listed}"
            raise ConfigurationError(msg)

    @property
    def required_guarantee(self) -> str | None:
        """The guarantee ``firesteel.guarantee`` asks of the whole pipeline, if any."""
        value = self.tree.get("guarantee", None)
        return None if value is None else str(value).lower().replace("_", "-")

    def guarantee(self) -> str:
        """What the pipeline gives end to end: the weakest of its streamlets' guarantees."""
        given = [self.streamlet(n).checkpointing.guarantee for n in self.verified.streamlets]
        return min(given, key=GUARANTEES.index, default="exactly-once")

    def _guarantee_problems(self, given: dict[str, str]) -> list[str]:
        required = self.required_guarantee
        if required is None:
            return []
        if required not in GUARANTEES:
            return [f"firesteel.guarantee: {required!r} is not one of {', '.join(GUARANTEES)}"]
        short = sorted(
            n for n, g in given.items() if GUARANTEES.index(g) < GUARANTEES.index(required)
        )
        if not short:
            return []
        listed = ", ".join(f"{n} ({given[n]})" for n in short)
        return [
            f"firesteel.guarantee: the pipeline must be {required}, but {listed} give less: "
            "turn their checkpointing on and set its mode, or lower the requirement"
        ]

    def streamlet(self, name: str) -> StreamletConfig:
        """The resolved configuration of streamlet ``name``."""
        resolved, problems = self._resolve(name)
        if resolved is None:
            raise ConfigurationError("; ".join(problems))
        return resolved

    def _resolve(self, name: str) -> tuple[StreamletConfig | None, list[str]]:
        """Streamlet ``name``'s configuration, or None and every problem with it."""
        problems: list[str] = []
        cls = self.verified.streamlets[name]
        scope = _child(self.tree, "streamlets", name)
        raw_parameters = _child(scope, "config-parameters")
        parameters = {}
        for parameter in cls.parameters:
            try:
                parameters[parameter.key] = parameter.value(
                    name, _value(raw_parameters, parameter.key)
                )
            except ConfigurationError as exc:
                problems.append(str(exc))
        runtime = _child(self.tree, "runtimes", "spark")
        spark_conf = {
            **_flatten(_child(runtime, "config")),
            **_flatten(_child(scope, "config")),
        }
        for key, value in spark_conf.items():
            if not isinstance(value, str | int | float | bool):
                # HOCON reads an unquoted 512m as 512 minutes: the text Spark wanted is lost.
                problems.append(
                    f"streamlet {name!r}: Spark setting {key!r} was read as a duration "
                    f'({value!r}); quote its value (e.g. "512m") so Spark gets it as written'
                )
        settings = dict(CHECKPOINT_DEFAULTS)
        for where, layer in (
            ("firesteel.runtimes.spark.checkpointing", _child(runtime, "checkpointing")),
            (f"firesteel.streamlets.{name}.checkpointing", _child(scope, "checkpointing")),
        ):
            settings.update(_checkpoint_keys(where, _flatten(layer), problems))
        if problems:
            return None, problems
        try:
            checkpointing, not_applied = _checkpointing(name, settings)
        except ConfigurationError as exc:
            return None, [str(exc)]
        return StreamletConfig(name, parameters, spark_conf, checkpointing, not_applied), []

    def supervision(self) -> RestartPolicy:
        """How the runner restarts a streamlet whose process died."""
        policy, problems = restart_policy(_flatten(_child(self.tree, "supervision")))
        if policy is None:
            raise ConfigurationError("; ".join(problems))
        return policy

    def kafka_properties(self) -> dict[str, str]:
        """``firesteel.kafka``'s librdkafka properties (``bootstrap.servers`` and any other);
        empty when topics are local."""
        return {k: str(v) for k, v in _flatten(_child(self.tree, "kafka")).items()}

    def effective(self, name: str) -> dict[str, Any]:
        """Streamlet ``name``'s effective configuration, secrets masked, for printing."""
        resolved = self.streamlet(name)
        checkpointing = resolved.checkpointing
        return {
            "streamlet": name,
            "class": self.verified.blueprint.streamlets[name],
            "config-parameters": {k: _show(v) for k, v in resolved.parameters.items()},
            "spark-config": {k: mask(k, v) for k, v in resolved.spark_conf.items()},
            "checkpointing": {
                "enabled": checkpointing.enabled,
                "trigger": checkpointing.trigger,
                "timeout": _show(checkpointing.timeout),
                "retain-on-stop": checkpointing.retain_on_stop,
                "retained-batches": checkpointing.retained_batches,
                "guarantee": checkpointing.guarantee,
            },
            "kafka": {k: mask(k, v) for k, v in self.kafka_properties().items()},
            "not-applied": list(resolved.not_applied),
        }


def mask(key: str, value: Any) -> Any:
    """``value``, or ``***`` when ``key`` names a secret (password, token, key...)."""
    last = key.lower().replace("-", ".").split(".")
    return "***" if any(word in part for part in last for word in SECRET_WORDS) else value


def _show(value: Any) -> Any:
    if isinstance(value, datetime.timedelta):
        return f"{int(value.total_seconds() * 1000)}ms"
    return value


def _parse(text: str, where: str) -> ConfigTree:
    try:
        return ConfigFactory.parse_string(text)
    except (ParseBaseException, ConfigException) as exc:
        msg = f"{where}: not valid HOCON: {exc}"
        raise ConfigurationError(msg) from None


def _value(tree: ConfigTree, key: str) -> Any:
    return tree.get(f'"{key}"', None)


def _child(tree: Any, *keys: str) -> ConfigTree:
    """The subtree at ``keys`` (each one key, dots and all), or an empty tree."""
    for key in keys:
        tree = tree.get(f'"{key}"', None) if isinstance(tree, ConfigTree) else None
    return tree if isinstance(tree, ConfigTree) else ConfigTree()


def _keys(tree: Any) -> list[str]:
    return [str(k).strip('"') for k in tree] if isinstance(tree, ConfigTree) else []


def _unknown(tree: Any, allowed: Sequence[str], where: str, problems: list[str]) -> None:
    for key in _keys(tree):
        if key not in allowed:
            problems.append(f"{where}.{key}: unknown key{did_you_mean(key, allowed)}")


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    if not isinstance(tree, ConfigTree):
        return flat
    for key in _keys(tree):
        value = _value(tree, key)
        name = f"{prefix}{key}"
        if isinstance(value, ConfigTree):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _checkpoint_keys(
    where: str, settings: Mapping[str, Any], problems: list[str]
) -> dict[str, Any]:
    """The checkpointing ``settings`` by firesteel's names; a problem per key it refuses."""
    resolved = {}
    for key, value in settings.items():
        name = FLINK_SPELLINGS.get(key, key)
        if name in CHECKPOINT_DEFAULTS:
            retention = key == "execution.checkpointing.externalized-checkpoint-retention"
            resolved[name] = str(value).upper() != "DELETE_ON_CANCELLATION" if retention else value
        elif key.startswith(FLINK_PREFIXES):
            problems.append(
                f"{where}.{key}: {key!r} is a Flink setting with no meaning in Spark; remove "
                "it (see firesteel.pipelines.config for the mapped keys)"
            )
        else:
            problems.append(
                f"{where}.{key}: unknown checkpointing key {key!r}"
                f"{did_you_mean(key, list(CHECKPOINT_DEFAULTS))}"
            )
    return resolved


def _checkpointing(
    streamlet: str, settings: Mapping[str, Any]
) -> tuple[Checkpointing, tuple[str, ...]]:
    def duration(key: str) -> datetime.timedelta:
        try:
            return parse_duration(settings[key])
        except ValueError as exc:
            msg = f"streamlet {streamlet!r}: checkpointing {key}: {exc}"
            raise ConfigurationError(msg) from None

    enabled = str(settings["default"]).lower() not in ("off", "false", "no")
    if int(settings["max-concurrent"]) != 1:
        msg = (
            f"streamlet {streamlet!r}: checkpointing max-concurrent = "
            f"{settings['max-concurrent']}: Spark runs one micro-batch at a time per query, "
            "so 1 is the only value"
        )
        raise ConfigurationError(msg)
    mode = str(settings["mode"]).lower().replace("_", "-")
    if mode not in ("exactly-once", "at-least-once"):
        msg = (
            f"streamlet {streamlet!r}: checkpointing mode {settings['mode']!r}: use "
            "exactly-once or at-least-once"
        )
        raise ConfigurationError(msg)
    interval = duration("interval")
    if interval <= datetime.timedelta(0):
        msg = f"streamlet {streamlet!r}: checkpointing interval must be positive"
        raise ConfigurationError(msg)
    not_applied = (
        f"min-pause {settings['min-pause']}: Spark has no pause between micro-batches "
        "(an overrunning batch's successor starts at once)",
    )
    return (
        Checkpointing(
            enabled=enabled,
            interval=interval,
            min_pause=duration("min-pause"),
            timeout=duration("timeout"),
            retain_on_stop=bool(settings["retain-on-stop"]),
            retained_batches=int(settings["retained-batches"]),
            guarantee=mode if enabled else "none",
        ),
        not_applied,
    )
