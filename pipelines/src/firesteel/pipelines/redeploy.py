"""Schema changes across deployments of one pipeline: what a running pipeline recorded.

Records stay in a topic after the streamlet that wrote them is redeployed, so
each topic keeps the Avro schema of every producer that ever wrote it
(``<work>/schemas/<topic>/<streamlet>.<outlet>.avsc``, recorded when a run
starts). A new deployment is refused, before anything starts, when one of its
consumers cannot read a recorded schema by Avro's reader/writer rules: the
check Cloudflow users asked for and never got.
"""

from __future__ import annotations

import json
from pathlib import Path

import avro.errors

from firesteel.core.toolkit import Folder
from firesteel.pipelines.errors import BlueprintError, Problem
from firesteel.pipelines.verify import VerifiedBlueprint, avro_schema, cannot_read


def _folder(work: Path, topic: str) -> Path:
    return work / "schemas" / topic


def check_recorded_schemas(verified: VerifiedBlueprint, work: Path) -> None:
    """Refuse consumers that cannot read what earlier deployments wrote (every problem at once)."""
    problems = []
    for key, consumers in verified.consumers.items():
        folder = _folder(work, verified.blueprint.topics[key].name)
        recorded = sorted(folder.glob("*.avsc")) if folder.is_dir() else []
        readers = (
            [(c, avro_schema(c.port.codec.avro_schema())) for c in consumers] if recorded else []
        )
        for path in recorded:
            try:
                writer = avro_schema(json.loads(path.read_text()))
            except (ValueError, avro.errors.AvroException) as exc:
                problems.append(Problem(f"recorded schema {path} is unreadable: {exc}"))
                continue
            for consumer, reader in readers:
                why = cannot_read(reader, writer)
                if why is not None:
                    problems.append(
                        verified.blueprint.problem(
                            f"topic {key!r}: {consumer.streamlet}.{consumer.port.name} cannot "
                            f"read the records {path.stem} wrote in an earlier deployment "
                            f"({why}); keep the change compatible (add fields with defaults) "
                            "or use a new topic",
                            "topics",
                            key,
                        )
                    )
    if problems:
        raise BlueprintError(problems)


def record_schemas(verified: VerifiedBlueprint, work: Path) -> None:
    """Record every producer's schema under its topic (replacing its own earlier record)."""
    for key, producers in verified.producers.items():
        folder = _folder(work, verified.blueprint.topics[key].name)
        folder.mkdir(parents=True, exist_ok=True)
        for producer in producers:
            name = f"{producer.streamlet}.{producer.port.name}"
            schema = json.dumps(producer.port.codec.avro_schema(), sort_keys=True, indent=1)
            path = folder / f"{name}.avsc"
            if path.exists() and path.read_text() != schema:
                # The producer's older records stay in the topic: keep their schema too.
                path.rename(folder / f"{name}.{_next_generation(folder, name)}.avsc")
            Folder(str(folder)).write(path.name, schema.encode(), sync=False)


def _next_generation(folder: Path, name: str) -> int:
    taken = [p.name.split(".")[-2] for p in folder.glob(f"{name}.*.avsc")]
    return 1 + max((int(n) for n in taken if n.isdigit()), default=0)
