"""Blueprint verification: every problem at once, before anything runs.

Checked, in Cloudflow's terms and beyond:

* names: streamlet names are DNS-1123 labels (they name processes, folders and
  Spark applications), topic names are valid Kafka topic names;
* streamlet references: the module imports, the class exists (did you mean),
  and it is a :class:`~firesteel.pipelines.streamlet.Streamlet`;
* port references: ``streamlet.port`` names a streamlet of the blueprint and a
  port of it (did you mean), producers are outlets and consumers inlets, and no
  port is bound to two topics;
* unconnected inlets (an outlet may stay unconnected: its records go nowhere);
* codecs: every producer and consumer of a topic use the same codec (JSON text
  cannot be read as Avro binary, nor the reverse);
* schemas: for every producer and consumer of a topic, the consumer's schema
  can read what the producer writes, by Avro's reader/writer rules (the ``avro``
  package's checker);
* unknown keys in a topic (did you mean).
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass
from typing import Any

import avro.errors
import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from firesteel.pipelines.blueprint import TOPIC_KEYS, Blueprint
from firesteel.pipelines.errors import BlueprintError, ConfigurationError, Problem, did_you_mean
from firesteel.pipelines.ports import StreamletPort
from firesteel.pipelines.streamlet import Streamlet

STREAMLET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


@dataclass(frozen=True)
class Connection:
    """A port bound to a topic."""

    topic: str
    streamlet: str
    port: StreamletPort


@dataclass(frozen=True)
class VerifiedBlueprint:
    """A blueprint that passed verification, with its streamlet classes resolved."""

    blueprint: Blueprint
    streamlets: dict[str, type[Streamlet]]
    producers: dict[str, tuple[Connection, ...]]
    """Topic key -> the outlets writing it."""
    consumers: dict[str, tuple[Connection, ...]]
    """Topic key -> the inlets reading it."""

    def topic_of(self, streamlet: str, port: str) -> str | None:
        """The topic key ``streamlet.port`` is bound to."""
        for table in (self.producers, self.consumers):
            for topic, connections in table.items():
                if any(c.streamlet == streamlet and c.port.name == port for c in connections):
                    return topic
        return None


def verify(blueprint: Blueprint) -> VerifiedBlueprint:
    """Check ``blueprint`` (module docs); raises BlueprintError listing every problem."""
    verified, problems = verify_partly(blueprint)
    if problems:
        raise BlueprintError(problems)
    return verified


def verify_partly(blueprint: Blueprint) -> tuple[VerifiedBlueprint, list[Problem]]:
    """Every problem of ``blueprint``, and what could be resolved despite them (the
    streamlets whose classes load, the connections to their ports), so that the
    configuration can be checked in the same run."""
    problems: list[Problem] = []
    classes = {}
    for name, reference in blueprint.streamlets.items():
        if not STREAMLET_NAME.match(name):
            problems.append(
                blueprint.problem(
                    f"streamlet name {name!r} is invalid: use at most 63 lowercase letters, "
                    "digits and '-', starting and ending with a letter or digit",
                    "streamlets",
                    name,
                )
            )
        resolved = _resolve(reference)
        if isinstance(resolved, str):
            problems.append(
                blueprint.problem(f"streamlet {name!r}: {resolved}", "streamlets", name)
            )
        else:
            classes[name] = resolved
    producers: dict[str, list[Connection]] = {}
    consumers: dict[str, list[Connection]] = {}
    bound: dict[tuple[str, str], list[str]] = {}
    for key, topic in blueprint.topics.items():
        if not TOPIC_NAME.match(topic.name):
            problems.append(
                blueprint.problem(
                    f"topic {key!r}: name {topic.name!r} is not a valid Kafka topic name "
                    "(letters, digits, '.', '_', '-', at most 249)",
                    "topics",
                    key,
                )
            )
        for unknown in topic.unknown_keys:
            problems.append(
                blueprint.problem(
                    f"topic {key!r}: unknown key {unknown!r}{did_you_mean(unknown, TOPIC_KEYS)}",
                    "topics",
                    key,
                    unknown,
                )
            )
        if topic.partitions_problem is not None:
            problems.append(
                blueprint.problem(
                    f"topic {key!r}: {topic.partitions_problem}", "topics", key, "partitions"
                )
            )
        if not topic.producers and not topic.consumers:
            problems.append(
                blueprint.problem(f"topic {key!r} has no producers and no consumers", "topics", key)
            )
        for role, references, table in (
            ("producer", topic.producers, producers),
            ("consumer", topic.consumers, consumers),
        ):
            for reference in references:
                found = _port(blueprint, classes, (key, role, reference), problems)
                if found is not None:
                    streamlet, port = found
                    table.setdefault(key, []).append(Connection(key, streamlet, port))
                    bound.setdefault((streamlet, port.name), []).append(key)
    for (streamlet, port_name), topics in sorted(bound.items()):
        if len(topics) > 1:
            problems.append(
                blueprint.problem(
                    f"port {streamlet}.{port_name} is bound to {len(topics)} topics "
                    f"({', '.join(sorted(topics))}): bind it to one",
                    "topics",
                    sorted(topics)[1],
                )
            )
    for name, cls in classes.items():
        for inlet in cls.shape.inlets:
            if (name, inlet.name) not in bound:
                problems.append(
                    blueprint.problem(
                        f"inlet {name}.{inlet.name} is not connected: add it to the consumers "
                        "of a topic",
                        "streamlets",
                        name,
                    )
                )
    for key in blueprint.topics:
        for writer in producers.get(key, []):
            for reader in consumers.get(key, []):
                message = _incompatible(reader, writer)
                if message:
                    problems.append(blueprint.problem(message, "topics", key))
    verified = VerifiedBlueprint(
        blueprint,
        classes,
        {k: tuple(v) for k, v in producers.items()},
        {k: tuple(v) for k, v in consumers.items()},
    )
    return verified, problems


def _resolve(reference: str) -> type[Streamlet] | str:
    """The class ``module.Class`` names, or what is wrong with the reference."""
    module_name, _, class_name = reference.rpartition(".")
    if not module_name:
        return f"{reference!r} is not 'module.Class'"
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        return f"cannot import module {module_name!r} ({exc})"
    found = getattr(module, class_name, None)
    if found is None:
        candidates = [
            n
            for n, v in vars(module).items()
            if inspect.isclass(v) and issubclass(v, Streamlet) and v is not Streamlet
        ]
        suggestion = did_you_mean(class_name, candidates)
        return f"module {module_name!r} has no class {class_name!r}{suggestion}"
    if not (inspect.isclass(found) and issubclass(found, Streamlet)):
        return f"{reference!r} is not a Streamlet subclass"
    if inspect.isabstract(found):
        return f"{reference!r} is abstract: implement create_logic"
    try:
        found()
    except Exception as exc:
        return (
            f"{reference!r} cannot be instantiated to read its shape ({exc!r}): keep it stateless"
        )
    return found


def _port(
    blueprint: Blueprint,
    classes: dict[str, type[Streamlet]],
    binding: tuple[str, str, str],
    problems: list[Problem],
) -> tuple[str, StreamletPort] | None:
    """The streamlet and port ``binding`` (topic, role, reference) names, else a problem."""
    topic, role, reference = binding
    streamlet, _, port_name = reference.partition(".")
    where = ("topics", topic, f"{role}s")
    if not port_name:
        problems.append(
            blueprint.problem(
                f"topic {topic!r}: {role} {reference!r} is not 'streamlet.port'", *where
            )
        )
        return None
    if streamlet not in blueprint.streamlets:
        suggestion = did_you_mean(streamlet, list(blueprint.streamlets))
        problems.append(
            blueprint.problem(
                f"topic {topic!r}: {role} {reference!r} names unknown streamlet "
                f"{streamlet!r}{suggestion}",
                *where,
            )
        )
        return None
    cls = classes.get(streamlet)
    if cls is None:
        return None
    wanted = cls.shape.outlets if role == "producer" else cls.shape.inlets
    other = cls.shape.inlets if role == "producer" else cls.shape.outlets
    port = next((p for p in wanted if p.name == port_name), None)
    if port is not None:
        return streamlet, port
    if any(p.name == port_name for p in other):
        kind = "an inlet" if role == "producer" else "an outlet"
        message = (
            f"topic {topic!r}: {role} {reference!r} is {kind}; "
            f"{role}s must be {'outlets' if role == 'producer' else 'inlets'}"
        )
    else:
        names = [p.name for p in wanted]
        message = (
            f"topic {topic!r}: streamlet {streamlet!r} has no "
            f"{'outlet' if role == 'producer' else 'inlet'} {port_name!r}"
            f"{did_you_mean(port_name, names)} (it has: {', '.join(names) or 'none'})"
        )
    problems.append(blueprint.problem(message, *where))
    return None


def avro_schema(schema: dict[str, Any]) -> avro.schema.Schema:
    """``schema`` parsed by the ``avro`` package (raises its AvroException when invalid)."""
    return avro.schema.make_avsc_object(schema)


def cannot_read(reader: avro.schema.Schema, writer: avro.schema.Schema) -> str | None:
    """Why ``reader`` cannot read what ``writer`` wrote, by Avro's rules; None if it can."""
    result = ReaderWriterCompatibilityChecker().get_compatibility(reader, writer)
    if result.compatibility is SchemaCompatibilityType.compatible:
        return None
    return f"{'; '.join(sorted(result.messages))}; at {', '.join(sorted(result.locations))}"


def _incompatible(reader: Connection, writer: Connection) -> str | None:
    if reader.port.codec.format != writer.port.codec.format:
        # Local topics store every port as Parquet, so only Kafka would show the mismatch:
        # the reader would decode the writer's bytes in the wrong format.
        return (
            f"topic {reader.topic!r}: {reader.streamlet}.{reader.port.name} reads "
            f"{reader.port.codec.format} but {writer.streamlet}.{writer.port.name} writes "
            f"{writer.port.codec.format}: give both ports the same codec"
        )
    try:
        why = cannot_read(
            avro_schema(reader.port.codec.avro_schema()),
            avro_schema(writer.port.codec.avro_schema()),
        )
    except (avro.errors.AvroException, ConfigurationError) as exc:
        return f"topic {reader.topic!r}: a port's schema is not valid Avro: {exc}"
    if why is None:
        return None
    return (
        f"topic {reader.topic!r}: {reader.streamlet}.{reader.port.name} cannot read what "
        f"{writer.streamlet}.{writer.port.name} writes ({why})"
    )
