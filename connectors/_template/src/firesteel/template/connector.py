"""``firesteel.template``: the Spark data source that builds the template sink."""

from __future__ import annotations

from typing import ClassVar

from pyspark.sql.types import StructType

from firesteel.core.spi import FiresteelDataSource, Guarantee, Sink, default_sink_id
from firesteel.template.options import TemplateSinkOptions
from firesteel.template.sink import TemplateSink


class TemplateConnector(FiresteelDataSource):
    """Registered as ``firesteel.template`` by :func:`firesteel.core.register`."""

    connector: ClassVar[str] = "template"

    def create_sink(self, schema: StructType) -> tuple[Sink, Guarantee | None]:
        options = self.parsed_options(TemplateSinkOptions)
        return TemplateSink(options.path, default_sink_id(dict(self.options))), options.guarantee
