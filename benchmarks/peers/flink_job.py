"""PyFlink's side of the peers group, run by the interpreter of its own virtual environment.

``python flink_job.py INPUT OUTPUT CHECKPOINTS {hashmap,rocksdb}``: the keyed running
count of the events in the text files of ``INPUT`` (lines ``seq,key``; PyFlink has
no Kafka or Parquet connector jar here, the text-line file source ships with it),
in a Python ``KeyedProcessFunction`` with a ``ValueState``, checkpointing every
second on the named state backend, parallelism 2 (the cores Spark's ``local[2]``
gets). Every update goes to a ``FileSink`` as ``key,count`` lines, made visible by
the checkpoints (exactly-once): each checkpoint rolls the part files, so what a
run committed is visible within a second (the default policy would show it only
once a file rolls, up to a minute later); the job ends when its bounded input is done.
Imports nothing of firesteel.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any

from pyflink.common import Configuration, Types, WatermarkStrategy
from pyflink.common.serialization import Encoder
from pyflink.datastream import KeyedProcessFunction, RuntimeContext, StreamExecutionEnvironment
from pyflink.datastream.connectors.file_system import (
    FileSink,
    FileSource,
    RollingPolicy,
    StreamFormat,
)
from pyflink.datastream.state import ValueStateDescriptor


class Count(KeyedProcessFunction):
    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value: str, ctx: Any) -> Iterator[str]:
        total = (self.count.value() or 0) + 1
        self.count.update(total)
        yield f"{ctx.get_current_key()},{total}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("checkpoints")
    parser.add_argument("backend", choices=["hashmap", "rocksdb"])
    args = parser.parse_args()
    config = Configuration()
    config.set_string("state.backend.type", args.backend)
    config.set_string("execution.checkpointing.interval", "1 s")
    config.set_string("execution.checkpointing.dir", f"file://{args.checkpoints}")
    config.set_string("python.executable", sys.executable)
    config.set_string("python.client.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(2)
    print(json.dumps({"event": "ready"}), flush=True)
    lines = env.from_source(
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), args.input).build(),
        WatermarkStrategy.no_watermarks(),
        "events",
    )
    (
        lines.map(lambda line: line.split(",", 1)[1], output_type=Types.STRING())
        .key_by(lambda key: key, key_type=Types.STRING())
        .process(Count(), output_type=Types.STRING())
        .sink_to(
            FileSink.for_row_format(args.output, Encoder.simple_string_encoder())
            .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
            .build()
        )
    )
    env.execute("peers-keyed-count")


if __name__ == "__main__":
    main()
