"""``firesteel.cassandra``: the Spark data source that builds the Cassandra sinks."""

from __future__ import annotations

from typing import ClassVar

from pyspark.sql.types import StructType

from firesteel.cassandra.options import CONNECTOR, PASSTHROUGH, CassandraSinkOptions
from firesteel.cassandra.sink import CassandraUpsertSink
from firesteel.cassandra.wal import CassandraAdditiveWalSink, CassandraWalSink
from firesteel.core.spi import (
    FiresteelDataSource,
    Guarantee,
    Sink,
    default_sink_id,
    parse_options,
)


class CassandraConnector(FiresteelDataSource):
    """Registered as ``firesteel.cassandra`` by :func:`firesteel.core.register`."""

    connector: ClassVar[str] = "cassandra"

    def create_sink(self, schema: StructType) -> tuple[Sink, Guarantee | None]:
        from pyspark.sql.pandas.types import to_arrow_schema

        given = dict(self.options)
        # fs.* options (over the session's spark.hadoop.fs.*) reach the write-ahead log's
        # store (log.location), not Cassandra.
        storage = self.storage_config()
        options = parse_options(
            CassandraSinkOptions,
            {key: value for key, value in given.items() if not key.startswith("fs.")},
            connector=CONNECTOR,
            passthrough_prefixes=PASSTHROUGH,
        )
        arrow_schema = to_arrow_schema(schema)
        sink_id = default_sink_id(dict(self.options))
        sink: Sink
        if options.mode == "wal":
            checkpoint = str(dict(self.options).get("checkpointlocation", ""))
            wal = CassandraWalSink if options.write == "insert" else CassandraAdditiveWalSink
            sink = wal(options, arrow_schema, sink_id, checkpoint, storage)
        else:
            sink = CassandraUpsertSink(options, arrow_schema, sink_id)
        return sink, options.guarantee
