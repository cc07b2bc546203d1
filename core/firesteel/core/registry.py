"""Discovery of installed connectors (entry point group ``firesteel.connectors``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "firesteel.connectors"


def register(spark: SparkSession) -> list[str]:
    """Register every installed connector with ``spark`` as a Python data source.

    Returns the format names registered (``firesteel.files``, ``firesteel.kafka``...).
    A connector whose own third-party dependency is missing is skipped with a
    debug log; any other import error is raised. Each connector carries the
    session's ``spark.hadoop.fs.*`` settings as they are now
    (:attr:`~firesteel.core.spark.datasource.FiresteelDataSource.session_storage`),
    so a store configured for Spark is configured for firesteel.
    """
    # Here, not at the top: every Spark Python process imports firesteel.core, and only
    # the driver registers; importlib.metadata (email, zipfile, csv...) costs ~15 ms.
    from importlib.metadata import entry_points

    from firesteel.core.spark.datasource import FiresteelDataSource
    from firesteel.core.storage import StorageConfig

    storage = StorageConfig.of(spark.conf.getAll)
    names = []
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            source_cls = entry.load()
        except ModuleNotFoundError as exc:
            logger.debug("firesteel: skipping connector %r: %s", entry.name, exc)
            continue
        if issubclass(source_cls, FiresteelDataSource) and storage.settings:
            source_cls = type(
                source_cls.__name__,
                (source_cls,),
                {"session_storage": storage, "__module__": source_cls.__module__},
            )
        spark.dataSource.register(source_cls)
        names.append(source_cls.name())
    logger.info("firesteel: registered %s", ", ".join(names) or "no connectors")
    return names
