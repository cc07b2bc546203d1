"""``firesteel.files``: the Spark data source that builds the file source and sink."""

from __future__ import annotations

from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from firesteel.core.spi import (
    ConfigError,
    FiresteelDataSource,
    Guarantee,
    ResettableSource,
    Sink,
    default_sink_id,
    parse_options,
)
from firesteel.core.toolkit import SETTING_PREFIX, canonical, read_query_id
from firesteel.files.sink.options import FilesSinkOptions
from firesteel.files.source.options import FilesSourceOptions


class FilesDataSource(FiresteelDataSource):
    """``spark.readStream.format("firesteel.files")`` / ``df.writeStream.format(...)``.

    Options: :class:`~firesteel.files.source.options.FilesSourceOptions` for reading,
    :class:`~firesteel.files.sink.options.FilesSinkOptions` for writing.
    """

    connector = "files"

    def create_source(self, schema: StructType | None) -> ResettableSource:
        from firesteel.files.source import FilesSource

        opts = parse_options(
            FilesSourceOptions,
            self.options,
            passthrough_prefixes=(SETTING_PREFIX,),
            connector=self.name(),
        )
        # Spark's TimestampType is an instant: Arrow needs a zone to spell it (UTC).
        arrow_schema = None
        if schema is not None and schema.fields:
            arrow_schema = to_arrow_schema(schema, timezone="UTC")
        return FilesSource(opts, arrow_schema, self.storage_config())

    def create_sink(self, schema: StructType) -> tuple[Sink, Guarantee | None]:
        from firesteel.files.sink import FilesSink, WriterConfig

        opts = parse_options(
            FilesSinkOptions,
            self.options,
            passthrough_prefixes=(SETTING_PREFIX,),
            connector=self.name(),
        )
        names = set(schema.names)
        unknown = [c for c in opts.bucket_columns if c not in names]
        if unknown:
            msg = (
                f"{self.name()}: option 'bucket.by' names {unknown}, which the query does "
                f"not have; its columns are {schema.names}"
            )
            raise ConfigError(msg)
        checkpoint = str(self.options.get("checkpointlocation", ""))
        config = WriterConfig(
            out=opts.path,
            sink_id=default_sink_id(
                dict(self.options),
                f"files:{canonical(opts.path)}",
                new_stream=opts.sink_new_stream,
            ),
            format=opts.format,
            bucket_columns=opts.bucket_columns,
            roll_size_bytes=opts.roll_size_bytes,
            compression=opts.compression,
            query_id=read_query_id(checkpoint) if checkpoint else None,
            storage=self.storage_config(),
        )
        return FilesSink(config, to_arrow_schema(schema, timezone="UTC")), opts.guarantee
