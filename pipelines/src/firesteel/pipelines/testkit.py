"""Run one streamlet on records given in memory and get its outlets' records back.

As Cloudflow's testkit and Quix Streams' ``run(collect=True)``: no broker, no
blueprint file. The records given for each inlet are written to a local topic
as one committed file; the streamlet's logic runs with ``availableNow``
triggers, so its queries stop once they have read everything; each outlet's
committed records come back as a list of dicts (read through the manifests,
exactly what the sink committed)::

    out = run_streamlet(spark, Metrics, {"in": [{"sensor": "a", "value": 1.0}]}, tmp_path)
    assert out["out"] == [...]

A streamlet whose logic runs on executors (a keyed processor, a UDF, a
``foreachBatch`` function) is pickled by reference to its module, so Spark's
Python workers must import that module. They inherit the driver's environment
(``PYTHONPATH``), not entries added to ``sys.path`` at run time (as pytest and
a ``sys.path.insert`` in a test do): install the module, put its folder on
``PYTHONPATH`` before Spark starts, or ship it with
``spark.sparkContext.addPyFile``. A class defined in ``__main__`` or inside a
function cannot be imported by the workers at all. Otherwise the query fails
with the workers' ``ModuleNotFoundError``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.pandas.types import to_arrow_schema

from firesteel.files import read_committed
from firesteel.pipelines.blueprint import parse_blueprint
from firesteel.pipelines.config import PipelineConfig
from firesteel.pipelines.local import LocalContext
from firesteel.pipelines.streamlet import Streamlet
from firesteel.pipelines.verify import verify


def _blueprint_of(cls: type[Streamlet]) -> str:
    reference = f"{cls.__module__}.{cls.__qualname__}"
    topics = [
        f'    "in-{p.name}" {{ consumers = ["under-test.{p.name}"] }}' for p in cls.shape.inlets
    ] + [f'    "out-{p.name}" {{ producers = ["under-test.{p.name}"] }}' for p in cls.shape.outlets]
    return (
        "blueprint {\n  streamlets { under-test = "
        + reference
        + " }\n  topics {\n"
        + "\n".join(topics)
        + "\n  }\n}\n"
    )


def run_streamlet(
    spark: Any,
    streamlet: type[Streamlet],
    inputs: Mapping[str, Sequence[Mapping[str, Any]]],
    work: Path,
    parameters: Mapping[str, Any] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Run ``streamlet`` once over ``inputs`` (inlet -> records); outlet -> records out."""
    verified = verify(parse_blueprint(_blueprint_of(streamlet), name="testkit"))
    arguments = [
        f'firesteel.streamlets.under-test.config-parameters.{key} = "{value}"'
        for key, value in (parameters or {}).items()
    ]
    config = PipelineConfig.load(verified, (), arguments)
    context = LocalContext(
        spark, verified, config, "under-test", work, trigger={"availableNow": True}
    )
    for inlet in streamlet.shape.inlets:
        port = context.ports[inlet.name]
        path = context.topic_path(inlet.name)
        path.mkdir(parents=True, exist_ok=True)
        records = list(inputs.get(inlet.name, ()))
        table = pa.Table.from_pylist(records, schema=to_arrow_schema(port.schema, timezone="UTC"))
        pq.write_table(table, path / "testkit-input.parquet")
    queries = streamlet().create_logic(context).run()
    for query in queries:
        query.awaitTermination()
    return {
        outlet.name: read_committed(str(context.topic_path(outlet.name))).to_pylist()
        for outlet in streamlet.shape.outlets
    }
