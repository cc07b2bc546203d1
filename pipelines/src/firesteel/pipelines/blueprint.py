"""Blueprints: which streamlets run, and which topics connect their ports, in HOCON.

The structure Cloudflow users know::

    blueprint {
      streamlets {
        readings = my_pipeline.streamlets.SensorIngress
        metrics = my_pipeline.streamlets.Metrics
      }
      topics {
        sensor-readings {
          producers = [readings.out]
          consumers = [metrics.in]
        }
      }
    }

A topic may also say ``topic.name`` (the Kafka topic or local topic folder,
default: its key; ``topic = "name"`` means the same) and ``partitions``.
:func:`load_blueprint` only parses; :func:`firesteel.pipelines.verify.verify`
checks everything at once. pyhocon
keeps no positions, so a problem's line is the first line of the file where
its key appears (good enough to jump to; said here so nobody trusts it more).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyhocon import ConfigFactory, ConfigTree
from pyhocon.exceptions import ConfigException
from pyparsing import ParseBaseException

from firesteel.pipelines.errors import BlueprintError, Problem, line_of


@dataclass(frozen=True)
class TopicBinding:
    """One topic of a blueprint: who writes it, who reads it."""

    key: str
    name: str
    producers: tuple[str, ...]
    consumers: tuple[str, ...]
    partitions: int | None
    unknown_keys: tuple[str, ...] = ()
    partitions_problem: str | None = None
    """Why ``partitions`` was refused (verification reports it with its line)."""


@dataclass(frozen=True)
class Blueprint:
    """A parsed (not yet verified) blueprint."""

    name: str
    streamlets: dict[str, str]
    """Streamlet name -> ``module.Class`` reference."""
    topics: dict[str, TopicBinding]
    config: ConfigTree
    """The whole parsed file: the ``firesteel { ... }`` section configures the pipeline."""
    source: str
    """The file's text (for line numbers)."""
    file: str | None = None

    def line_of(self, *keys: str) -> int | None:
        """The first line where ``keys`` appear in order as HOCON keys (see module docs)."""
        return line_of(self.source, *keys)

    def problem(self, message: str, *keys: str) -> Problem:
        """A problem located at ``keys``."""
        return Problem(message, self.file, self.line_of(*keys) if keys else None)


TOPIC_KEYS = ("producers", "consumers", "topic", "partitions")


def load_blueprint(path: str | Path) -> Blueprint:
    """Parse the blueprint file at ``path``; a syntax error is a BlueprintError with its line."""
    file = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        msg = f"cannot read the blueprint: {exc.strerror}"
        raise BlueprintError([Problem(msg, file)]) from None
    return parse_blueprint(text, file, Path(path).stem)


def _topic_name(binding: ConfigTree, key: str) -> str:
    """``topic.name`` (Cloudflow's spelling) or ``topic = "name"``; the key by default."""
    topic = binding.get("topic", None)
    if isinstance(topic, ConfigTree):
        return str(topic.get("name", key))
    return key if topic is None else str(topic)


def parse_blueprint(text: str, file: str | None = None, name: str = "pipeline") -> Blueprint:
    """Parse blueprint text; ``name`` names the pipeline (default: the file's stem)."""
    try:
        tree = ConfigFactory.parse_string(text)
    except (ParseBaseException, ConfigException) as exc:
        line = getattr(exc, "lineno", None)
        raise BlueprintError([Problem(f"not valid HOCON: {exc}", file, line)]) from None
    section = tree.get("blueprint", None)
    if not isinstance(section, ConfigTree):
        problem = Problem("no 'blueprint { ... }' section", file, None)
        raise BlueprintError([problem])
    streamlets_tree = section.get("streamlets", ConfigTree())
    topics_tree = section.get("topics", ConfigTree())
    streamlets = {str(k): str(v) for k, v in _items(streamlets_tree)}
    topics = {}
    for key, value in _items(topics_tree):
        binding = value if isinstance(value, ConfigTree) else ConfigTree()
        partitions, partitions_problem = _partitions(binding.get("partitions", None))
        topics[str(key)] = TopicBinding(
            key=str(key),
            name=_topic_name(binding, str(key)),
            producers=tuple(str(p) for p in _as_list(binding.get("producers", []))),
            consumers=tuple(str(c) for c in _as_list(binding.get("consumers", []))),
            partitions=partitions,
            unknown_keys=tuple(str(k) for k in binding if k not in TOPIC_KEYS),
            partitions_problem=partitions_problem,
        )
    return Blueprint(
        name=str(tree.get("firesteel.blueprint-name", name)),
        streamlets=streamlets,
        topics=topics,
        config=tree,
        source=text,
        file=file,
    )


def _items(tree: Any) -> list[tuple[str, Any]]:
    if not isinstance(tree, ConfigTree):
        return []
    return [(str(key).strip('"'), tree[key]) for key in tree]


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _partitions(value: Any) -> tuple[int | None, str | None]:
    """``partitions`` as a positive whole number, else None and why it is refused."""
    if value is None:
        return None, None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value, None
    text = str(value).strip()
    if text.isdigit() and int(text) > 0:
        return int(text), None
    return None, f"partitions = {value!r}: expected a whole number of at least 1 (e.g. 3)"
