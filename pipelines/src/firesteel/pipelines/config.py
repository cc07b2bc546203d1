"""One configuration model for a pipeline: defaults < blueprint < ``--conf`` files < ``key=value``.

Every layer is HOCON with the same keys, all under ``firesteel``; a later layer
wins key by key (files in the order given, then arguments in order)::

    firesteel {
      runtimes.spark {
        config { "spark.sql.shuffle.partitions" = 4 }   # every streamlet's SparkSession
        checkpointing { interval = 5s }                   # every streamlet
      }
      streamlets.metrics {
        config-parameters { window = 10m }                # one streamlet's parameters
        config { "spark.sql.shuffle.partitions" = 8 }     # its SparkSession
        checkpointing { interval = 1s }                   # its queries
        parallelism = 4                                   # its queries' partitions
      }
      kafka { bootstrap.servers = "127.0.0.1:9092" }      # topics on Kafka (else local topics)
      supervision { restarts = 20 }                       # restarts of a failed streamlet
      runner { jvm = shared }                             # one Spark application for all
    }

``supervision``: how the runner restarts a streamlet that died
(:mod:`firesteel.pipelines.supervision`).

``parallelism`` (Cloudflow's ``kubectl cloudflow scale``): a whole number >= 1,
the Spark partitions of the streamlet's queries (its session's
``spark.sql.shuffle.partitions``, unless its own ``config`` sets that key),
and, over Kafka, the partitions of a topic it produces or consumes when the
runner creates it and the blueprint's topic gives no ``partitions`` (the
largest parallelism of the topic's streamlets; the Kafka source reads one
Spark partition per topic partition). An existing topic keeps its partitions.

``runner.jvm``: ``shared`` (the default of ``run-local``) runs every streamlet
as queries of one Spark application, one driver JVM
(:mod:`firesteel.pipelines.host`); ``per-streamlet`` gives each streamlet its
own process, SparkSession and JVM, as ``run --master`` always does. In one
application, a Spark setting that only the application can take (anything not
``spark.sql.*``: driver memory, JVM options) must be the same for every
streamlet: one that differs between streamlets is a configuration problem.

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
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyhocon import ConfigFactory, ConfigTree
from pyhocon.exceptions import ConfigException
from pyparsing import ParseBaseException

from firesteel.pipelines.errors import ConfigurationError, Problem, did_you_mean, line_of
from firesteel.pipelines.parameters import MemorySizeParameter, parse_duration
from firesteel.pipelines.supervision import RestartPolicy, restart_policy
from firesteel.pipelines.verify import VerifiedBlueprint

ROOT_KEYS = (
    "streamlets",
    "runtimes",
    "kafka",
    "blueprint-name",
    "guarantee",
    "supervision",
    "runner",
)
GUARANTEES = ("none", "at-least-once", "exactly-once")
"""Weakest first: a pipeline gives the weakest of its streamlets' guarantees."""
STREAMLET_KEYS = ("config-parameters", "config", "checkpointing", "parallelism")
RUNNER_KEYS = ("jvm",)
JVM_MODES = ("shared", "per-streamlet")
"""``firesteel.runner.jvm``: one Spark application for every streamlet (the default), or one
each."""
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
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
    parallelism: int | None = None
    """``parallelism`` (module docs), when set."""


@dataclass(frozen=True)
class _Layer:
    """One layer of the configuration: its ``firesteel`` section and where it was written."""

    tree: ConfigTree
    file: str | None
    text: str
    """The layer's HOCON text (for a ``key=value`` argument, as parsed)."""
    has_lines: bool = True
    """False for an argument: its one line is named by the argument itself."""

    def sets(self, path: Sequence[str]) -> bool:
        """Whether this layer sets the key at ``path`` (or something under it)."""
        joined = ".".join(path)
        return any(k == joined or k.startswith(f"{joined}.") for k in _flatten(self.tree))

    def problem(self, message: str, path: Sequence[str]) -> Problem:
        line = line_of(self.text, "firesteel", *path) if self.has_lines else None
        return Problem(message, self.file, line)

    def literal(self, path: Sequence[str]) -> str | None:
        """The text of the value at ``path`` as written (a word, or a number and a unit)."""
        line = line_of(self.text, "firesteel", *path)
        if line is None:
            return None
        text = self.text.splitlines()[line - 1]
        key = re.search(rf'{re.escape(path[-1])}"?\s*[=:]\s*', text)
        value = _LITERAL.match(text, key.end()) if key else None
        return value.group(0).strip() if value else None


_PATH = re.compile(r'(?:"(?:[^"\\]|\\.)*"|[^."{}\[\]=:\s]|\.)+')
"""A HOCON path alone (``a.b."c.d"``), not the start of an object (``a { ...``). One
character per repetition outside quotes: ``[^...]+`` inside the ``+`` split an unquoted run
every possible way before failing, 17 s for a 40-character key with an unclosed quote."""
_LITERAL = re.compile(r"[0-9.]+\s*[a-zA-Z]*|[^\s,}#]+")

_Found = tuple[str, tuple[str, ...]]
"""A problem's message and the key path (under ``firesteel``) it is about."""


class PipelineConfig:
    """The merged layers of one pipeline's configuration (see the module docs)."""

    def __init__(
        self, verified: VerifiedBlueprint, tree: ConfigTree, layers: Sequence[_Layer] = ()
    ) -> None:
        self.verified = verified
        self.tree = tree
        self.layers = tuple(layers)

    @classmethod
    def load(
        cls,
        verified: VerifiedBlueprint,
        files: Sequence[str | Path] = (),
        arguments: Sequence[str] = (),
    ) -> PipelineConfig:
        """Merge the blueprint's ``firesteel`` section, ``files``, then ``key=value`` arguments;
        raises ConfigurationError listing every problem, each with its file and line."""
        config, problems = cls.read(verified, files, arguments)
        if problems:
            raise ConfigurationError.listing(problems)
        return config

    @classmethod
    def read(
        cls,
        verified: VerifiedBlueprint,
        files: Sequence[str | Path] = (),
        arguments: Sequence[str] = (),
    ) -> tuple[PipelineConfig, list[Problem]]:
        """The merged configuration and every problem with it, each with its file and line.

        ``verified`` may be partial (a blueprint with problems): only the streamlets it
        resolved are checked, so configuration and blueprint problems come in one report.
        """
        blueprint = verified.blueprint
        layers = [_Layer(_section(blueprint.config), blueprint.file, blueprint.source)]
        problems: list[Problem] = []
        for path in files:
            try:
                text = Path(path).read_text()
            except OSError as exc:
                problems.append(Problem(f"cannot read it: {exc.strerror}", str(path)))
                continue
            tree = _parse(text, str(path), problems)
            if tree is not None:
                layers.append(_Layer(_section(tree), str(path), text))
        for argument in arguments:
            where = f"argument {argument!r}"
            key, separator, value = argument.partition("=")
            if not separator or not key.strip():
                problems.append(Problem("expected key=value", where))
                continue
            text = _setting(key.strip(), value)
            tree = _parse(text, where, problems, has_lines=False)
            if tree is not None:
                layers.append(_Layer(_section(tree), where, text, has_lines=False))
        merged = ConfigTree()
        for layer in layers:
            merged = ConfigTree.merge_configs(merged, layer.tree)
        config = cls(verified, merged, layers)
        found = dict.fromkeys(config._locate(message, path) for message, path in config._check())
        return config, [*problems, *found]

    def check(self) -> None:
        """Refuse unknown keys (with suggestions) and invalid values, all problems at once."""
        problems = [self._locate(message, path) for message, path in self._check()]
        problems = list(dict.fromkeys(problems))
        if problems:
            raise ConfigurationError.listing(problems)

    def _locate(self, message: str, path: tuple[str, ...]) -> Problem:
        """``message`` at the last layer that sets ``path`` (it wins), else the blueprint."""
        for layer in reversed(self.layers):
            if layer.sets(path):
                return layer.problem(message, path)
        blueprint = self.verified.blueprint
        line = None
        if path[:1] == ("streamlets",) and len(path) > 1:
            line = blueprint.line_of("blueprint", "streamlets", path[1])
        return Problem(message, blueprint.file, line)

    def _literal(self, path: tuple[str, ...]) -> str | None:
        """The value at ``path`` as written in the layer that wins, when its text has it."""
        layer = next((layer for layer in reversed(self.layers) if layer.sets(path)), None)
        return None if layer is None else layer.literal(path)

    def _check(self) -> list[_Found]:
        problems: list[_Found] = []
        _unknown(self.tree, ROOT_KEYS, (), problems)
        streamlets = _child(self.tree, "streamlets")
        known = list(self.verified.blueprint.streamlets)
        for name in _keys(streamlets):
            if name not in known:
                problems.append(
                    (
                        f"firesteel.streamlets.{name}: no streamlet {name!r} in the blueprint"
                        f"{did_you_mean(name, known)}",
                        ("streamlets", name),
                    )
                )
                continue
            scope = _child(streamlets, name)
            _unknown(scope, STREAMLET_KEYS, ("streamlets", name), problems)
            if name not in self.verified.streamlets:
                continue
            declared = [p.key for p in self.verified.streamlets[name].parameters]
            parameters = _child(scope, "config-parameters")
            for key in _keys(parameters):
                if key not in declared:
                    problems.append(
                        (
                            f"firesteel.streamlets.{name}.config-parameters.{key}: streamlet "
                            f"{name!r} declares no parameter {key!r}"
                            f"{did_you_mean(key, declared)}"
                            f" (it declares: {', '.join(declared) or 'none'})",
                            ("streamlets", name, "config-parameters", key),
                        )
                    )
        _unknown(_child(self.tree, "runtimes"), ("spark",), ("runtimes",), problems)
        runtime = _child(self.tree, "runtimes", "spark")
        _unknown(runtime, RUNTIME_KEYS, ("runtimes", "spark"), problems)
        resolved = {}
        for name in self.verified.streamlets:
            config, found = self._resolve(name)
            problems.extend(found)
            if config is not None:
                resolved[name] = config.checkpointing.guarantee
        problems.extend(self._guarantee_problems(resolved))
        problems.extend(self._runner_problems())
        for message in restart_policy(_flatten(_child(self.tree, "supervision")))[1]:
            key = message.partition(":")[0].removeprefix("firesteel.")
            problems.append((message, tuple(key.split(".", 1))))
        return list(dict.fromkeys(problems))

    def _runner_problems(self) -> list[_Found]:
        """``firesteel.runner``'s problems; in one application, a Spark setting that only the
        application takes but that differs between streamlets."""
        runner = _child(self.tree, "runner")
        problems: list[_Found] = []
        _unknown(runner, RUNNER_KEYS, ("runner",), problems)
        mode = runner.get("jvm", None)
        if mode is not None and str(mode) not in JVM_MODES:
            problems.append(
                (
                    f"firesteel.runner.jvm: {mode!r} is not one of {', '.join(JVM_MODES)}"
                    f"{did_you_mean(str(mode), list(JVM_MODES))}",
                    ("runner", "jvm"),
                )
            )
        if problems or self.jvm != "shared":
            return problems
        runtime = _flatten(_child(self.tree, "runtimes", "spark", "config"))
        scoped = {
            name: _flatten(_child(self.tree, "streamlets", name, "config"))
            for name in self.verified.streamlets
        }
        for key in sorted({k for conf in scoped.values() for k in conf}):
            if key.startswith("spark.sql."):
                continue
            effective = {str(conf.get(key, runtime.get(key))) for conf in scoped.values()}
            if len(effective) < 2:
                continue
            for name in sorted(n for n, conf in scoped.items() if key in conf):
                problems.append(
                    (
                        f"firesteel.streamlets.{name}.config.{key}: a setting of the Spark "
                        "application, which every streamlet shares with firesteel.runner.jvm = "
                        "shared; set it once in firesteel.runtimes.spark.config, or give each "
                        "streamlet its own JVM with firesteel.runner.jvm = per-streamlet",
                        ("streamlets", name, "config", key),
                    )
                )
        return problems

    @property
    def jvm(self) -> str:
        """``firesteel.runner.jvm``: ``shared`` (default) or ``per-streamlet`` (module docs)."""
        return str(_child(self.tree, "runner").get("jvm", "shared"))

    @property
    def required_guarantee(self) -> str | None:
        """The guarantee ``firesteel.guarantee`` asks of the whole pipeline, if any."""
        value = self.tree.get("guarantee", None)
        return None if value is None else str(value).lower().replace("_", "-")

    def guarantee(self) -> str:
        """What the pipeline gives end to end: the weakest of its streamlets' guarantees."""
        given = [self.streamlet(n).checkpointing.guarantee for n in self.verified.streamlets]
        return min(given, key=GUARANTEES.index, default="exactly-once")

    def _guarantee_problems(self, given: dict[str, str]) -> list[_Found]:
        required = self.required_guarantee
        if required is None:
            return []
        if required not in GUARANTEES:
            message = f"firesteel.guarantee: {required!r} is not one of {', '.join(GUARANTEES)}"
            return [(message, ("guarantee",))]
        short = sorted(
            n for n, g in given.items() if GUARANTEES.index(g) < GUARANTEES.index(required)
        )
        if not short:
            return []
        listed = ", ".join(f"{n} ({given[n]})" for n in short)
        message = (
            f"firesteel.guarantee: the pipeline must be {required}, but {listed} give less: "
            "turn their checkpointing on and set its mode, or lower the requirement"
        )
        return [(message, ("guarantee",))]

    def streamlet(self, name: str) -> StreamletConfig:
        """The resolved configuration of streamlet ``name``."""
        resolved, problems = self._resolve(name)
        if resolved is None:
            located = [self._locate(message, path) for message, path in problems]
            raise ConfigurationError.listing(located)
        return resolved

    def _resolve(self, name: str) -> tuple[StreamletConfig | None, list[_Found]]:
        """Streamlet ``name``'s configuration, or None and every problem with it."""
        problems: list[_Found] = []
        cls = self.verified.streamlets[name]
        scope = _child(self.tree, "streamlets", name)
        raw_parameters = _child(scope, "config-parameters")
        parameters = {}
        for parameter in cls.parameters:
            raw = _value(raw_parameters, parameter.key)
            path: tuple[str, ...] = ("streamlets", name, "config-parameters", parameter.key)
            read_as_duration = isinstance(raw, datetime.timedelta) or hasattr(raw, "normalized")
            if isinstance(parameter, MemorySizeParameter) and read_as_duration:
                # pyhocon reads an unquoted 512m as 512 minutes; Typesafe Config's
                # getMemorySize reads the text, so the text as written is what counts.
                raw = self._literal(path) or raw
            try:
                parameters[parameter.key] = parameter.value(name, raw)
            except ConfigurationError as exc:
                problems.append((str(exc), path))
        runtime = _child(self.tree, "runtimes", "spark")
        spark_conf: dict[str, Any] = {}
        for path, layer in (
            (("runtimes", "spark", "config"), _child(runtime, "config")),
            (("streamlets", name, "config"), _child(scope, "config")),
        ):
            for key, value in _flatten(layer).items():
                spark_conf[key] = value
                if not isinstance(value, str | int | float | bool):
                    # HOCON reads an unquoted 512m as 512 minutes: the text Spark wanted is
                    # lost. Named by where it is set, so a shared setting is reported once.
                    problems.append(
                        (
                            f"firesteel.{'.'.join(path)}.{key}: Spark setting {key!r} was read "
                            f'as a duration ({value!r}); quote its value (e.g. "512m") so '
                            "Spark gets it as written",
                            (*path, key),
                        )
                    )
        parallelism = _value(scope, "parallelism")
        if parallelism is not None:
            if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
                problems.append(
                    (
                        f"firesteel.streamlets.{name}.parallelism: {parallelism!r} is not a whole "
                        "number >= 1 (the Spark partitions of its queries)",
                        ("streamlets", name, "parallelism"),
                    )
                )
            elif SHUFFLE_PARTITIONS not in _flatten(_child(scope, "config")):
                spark_conf[SHUFFLE_PARTITIONS] = parallelism
        settings = dict(CHECKPOINT_DEFAULTS)
        origin: dict[str, tuple[str, ...]] = {}
        for path, layer in (
            (("runtimes", "spark", "checkpointing"), _child(runtime, "checkpointing")),
            (("streamlets", name, "checkpointing"), _child(scope, "checkpointing")),
        ):
            for key, (value, where) in _checkpoint_keys(path, _flatten(layer), problems).items():
                settings[key] = value
                origin[key] = where
        checkpointing = _checkpointing(settings, origin, problems)
        if problems or checkpointing is None:
            return None, problems
        settings_applied, not_applied = checkpointing
        return (
            StreamletConfig(
                name, parameters, spark_conf, settings_applied, not_applied, parallelism
            ),
            [],
        )

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
            "parallelism": resolved.parallelism,
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


def _parse(
    text: str, where: str, problems: list[Problem], *, has_lines: bool = True
) -> ConfigTree | None:
    """``text`` parsed, or None and a one-line problem (pyparsing's own message lists its
    whole grammar)."""
    hint = (
        'a key holding dots is quoted inside braces: a { "b.c" = 1 }'
        if has_lines
        else 'a key holding dots is quoted: a."b.c"=1; quote the whole argument for the shell'
    )
    try:
        return ConfigFactory.parse_string(text)
    except ParseBaseException as exc:
        problems.append(
            Problem(
                f"not valid HOCON at column {exc.col}: {exc.line.strip()!r} ({hint})",
                where,
                exc.lineno if has_lines else None,
            )
        )
    except ConfigException as exc:
        problems.append(Problem(f"not valid HOCON: {exc}", where))
    return None


def _setting(key: str, value: str) -> str:
    """``key = value`` as HOCON; a path with quoted segments (``a."b.c"``, valid HOCON that
    pyhocon refuses as a path) is written as nested braces, so ``b.c`` stays one key."""
    if '"' not in key or not _PATH.fullmatch(key):
        return f"{key} = {value}"
    segments: list[str] = []
    current = ""
    for token in re.findall(r'"(?:[^"\\]|\\.)*"|[^."]+|\.', key):
        if token == ".":
            segments.append(current)
            current = ""
        elif token.startswith('"'):
            current += json.loads(token)
        else:
            current += token.strip()
    segments.append(current)
    if any(not segment for segment in segments):
        return f"{key} = {value}"
    *outer, last = (json.dumps(segment) for segment in segments)
    opened = "".join(f"{segment} {{ " for segment in outer)
    return f"{opened}{last} = {value}{' }' * len(outer)}"


def _section(tree: ConfigTree) -> ConfigTree:
    """The ``firesteel`` section of a parsed layer (empty when it has none)."""
    section = tree.get("firesteel", None)
    return section if isinstance(section, ConfigTree) else ConfigTree()


def _value(tree: ConfigTree, key: str) -> Any:
    return tree.get(f'"{key}"', None)


def _child(tree: Any, *keys: str) -> ConfigTree:
    """The subtree at ``keys`` (each one key, dots and all), or an empty tree."""
    for key in keys:
        tree = tree.get(f'"{key}"', None) if isinstance(tree, ConfigTree) else None
    return tree if isinstance(tree, ConfigTree) else ConfigTree()


def _keys(tree: Any) -> list[str]:
    return [str(k).strip('"') for k in tree] if isinstance(tree, ConfigTree) else []


def _unknown(
    tree: Any, allowed: Sequence[str], path: tuple[str, ...], problems: list[_Found]
) -> None:
    where = ".".join(("firesteel", *path))
    for key in _keys(tree):
        if key not in allowed:
            problems.append(
                (f"{where}.{key}: unknown key{did_you_mean(key, allowed)}", (*path, key))
            )


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
    path: tuple[str, ...], settings: Mapping[str, Any], problems: list[_Found]
) -> dict[str, tuple[Any, tuple[str, ...]]]:
    """The checkpointing ``settings`` by firesteel's names, each with the path that set it;
    a problem per key it refuses."""
    where = ".".join(("firesteel", *path))
    resolved = {}
    for key, value in settings.items():
        name = FLINK_SPELLINGS.get(key, key)
        if name in CHECKPOINT_DEFAULTS:
            retention = key == "execution.checkpointing.externalized-checkpoint-retention"
            setting = str(value).upper() != "DELETE_ON_CANCELLATION" if retention else value
            resolved[name] = (setting, (*path, key))
        elif key.startswith(FLINK_PREFIXES):
            problems.append(
                (
                    f"{where}.{key}: {key!r} is a Flink setting with no meaning in Spark; "
                    "remove it (see firesteel.pipelines.config for the mapped keys)",
                    (*path, key),
                )
            )
        else:
            problems.append(
                (
                    f"{where}.{key}: unknown checkpointing key {key!r}"
                    f"{did_you_mean(key, list(CHECKPOINT_DEFAULTS))}",
                    (*path, key),
                )
            )
    return resolved


def _checkpointing(
    settings: Mapping[str, Any], origin: Mapping[str, tuple[str, ...]], problems: list[_Found]
) -> tuple[Checkpointing, tuple[str, ...]] | None:
    """The resolved checkpointing, or None after adding a problem per refused value, each
    named by the key that set it (so a shared setting is reported once)."""
    found = len(problems)

    def refuse(key: str, why: str) -> None:
        path = origin.get(key, ("runtimes", "spark", "checkpointing", key))
        problems.append((f"firesteel.{'.'.join(path)} = {settings[key]!r}: {why}", path))

    def duration(key: str) -> datetime.timedelta:
        try:
            return parse_duration(settings[key])
        except ValueError as exc:
            refuse(key, str(exc))
            return datetime.timedelta(0)

    enabled = str(settings["default"]).lower() not in ("off", "false", "no")
    try:
        concurrent = int(settings["max-concurrent"])
    except (TypeError, ValueError):
        concurrent = 0
    if concurrent != 1:
        refuse(
            "max-concurrent",
            "Spark runs one micro-batch at a time per query, so 1 is the only value",
        )
    mode = str(settings["mode"]).lower().replace("_", "-")
    if mode not in ("exactly-once", "at-least-once"):
        refuse("mode", "use exactly-once or at-least-once")
    try:
        retained = int(settings["retained-batches"])
    except (TypeError, ValueError):
        refuse("retained-batches", "expected a whole number")
        retained = 0
    before = len(problems)
    interval = duration("interval")
    if len(problems) == before and interval <= datetime.timedelta(0):
        refuse("interval", "must be positive")
    min_pause, timeout = duration("min-pause"), duration("timeout")
    if len(problems) > found:
        return None
    not_applied = (
        f"min-pause {settings['min-pause']}: Spark has no pause between micro-batches "
        "(an overrunning batch's successor starts at once)",
    )
    return (
        Checkpointing(
            enabled=enabled,
            interval=interval,
            min_pause=min_pause,
            timeout=timeout,
            retain_on_stop=bool(settings["retain-on-stop"]),
            retained_batches=retained,
            guarantee=mode if enabled else "none",
        ),
        not_applied,
    )
