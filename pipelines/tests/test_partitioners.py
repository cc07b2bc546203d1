"""Kafka outlets' partitioners (round-robin, a user function) and a streamlet's parallelism
giving its topics' partitions, on the suite's broker, read back by a plain consumer."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from firesteel.pipelines import AvroCodec, ConfigurationError, Outlet, round_robin
from firesteel.pipelines.kafka import KafkaContext, create_topics
from firesteel.pipelines.runner import load

RECORD = {"type": "record", "name": "Item", "fields": [{"name": "id", "type": "string"}]}
STREAMLETS = '''
from firesteel.pipelines import AvroCodec, Outlet, Streamlet, StreamletLogic, StreamletShape
from firesteel.pipelines import StringParameter, round_robin

ITEM = {"type": "record", "name": "Item", "fields": [{"name": "id", "type": "string"}]}


def by_digit(key, partitions):
    """The key's last digit, modulo the partition count."""
    return int(key.decode()[-1]) % partitions


class Items(Streamlet):
    shape = StreamletShape(
        outlets=[
            Outlet("spread", AvroCodec(ITEM), key="id", partitioner=round_robin),
            Outlet("chosen", AvroCodec(ITEM), key="id", partitioner=by_digit),
        ]
    )
    parameters = (StringParameter("input-dir", "folder of JSON-lines items"),)

    def create_logic(self, context):
        return ItemsLogic(context)


class ItemsLogic(StreamletLogic):
    def run(self):
        items = (
            self.context.spark.readStream.format("firesteel.files")
            .schema("id string")
            .option("format", "json")
            .load(self.context.config["input-dir"])
        )
        return [
            self.context.write_stream(items, "spread"),
            self.context.write_stream(items, "chosen"),
        ]
'''


def test_a_partitioner_must_be_importable_by_sparks_python_workers() -> None:
    def nested(key: bytes | None, partitions: int) -> int:
        return 0

    for bad in (lambda key, partitions: 0, nested):
        with pytest.raises(ConfigurationError, match=r"outlet .out.: partitioner .* module level"):
            Outlet("out", AvroCodec(RECORD), partitioner=bad)
    outlet = Outlet("out", AvroCodec(RECORD), partitioner=round_robin)
    assert outlet.partitioner_reference == "firesteel.pipelines.partitioners:round_robin"
    assert Counter(round_robin(b"same", 4) for _ in range(8)) == dict.fromkeys(range(4), 2)


def test_round_robin_and_a_user_function_place_records_and_parallelism_sizes_topics(
    spark: Any, bootstrap: str, tmp_path: Path
) -> None:
    from firesteel.testing.kafka import read_committed

    module = tmp_path / f"items_{tmp_path.name.replace('-', '_')}.py"
    module.write_text(STREAMLETS)
    # Spark's Python workers import the user's partitioner by module name.
    spark.sparkContext.addPyFile(str(module))
    blueprint = tmp_path / "items.conf"
    blueprint.write_text(
        f"""
blueprint {{
  streamlets {{ items = {module.stem}.Items }}
  topics {{
    spread {{ topic.name = "spread-{tmp_path.name}", producers = [items.spread] }}
    chosen {{ topic.name = "chosen-{tmp_path.name}", producers = [items.chosen] }}
  }}
}}
"""
    )
    inputs = tmp_path / "in"
    inputs.mkdir()
    ids = [f"k{i}" for i in range(8)]
    (inputs / "items.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))
    settings = [
        f'firesteel.kafka.bootstrap.servers = "{bootstrap}"',
        "firesteel.streamlets.items.parallelism = 4",
        f"firesteel.streamlets.items.config-parameters.input-dir = {inputs}",
    ]
    verified, config = load(blueprint, [], settings)
    create_topics(verified, config)
    context = KafkaContext(
        spark, verified, config, "items", tmp_path / "work", trigger={"availableNow": True}
    )
    queries = verified.streamlets["items"]().create_logic(context).run()
    deadline = time.monotonic() + 120
    for query in queries:
        query.awaitTermination(max(1.0, deadline - time.monotonic()))
        assert query.exception() is None, query.exception()
    spread = read_committed(bootstrap, f"spread-{tmp_path.name}")
    chosen = read_committed(bootstrap, f"chosen-{tmp_path.name}")
    # Four partitions from the streamlet's parallelism (the default would be 3); round-robin
    # puts two of the eight records in each, the user function each where its digit says.
    assert Counter(r.partition for r in spread) == dict.fromkeys(range(4), 2)
    assert sorted((r.key or b"").decode() for r in spread) == ids
    assert {((r.key or b"").decode(), r.partition) for r in chosen} == {
        (i, int(i[-1]) % 4) for i in ids
    }
    sys.modules.pop(module.stem, None)
