"""Options of ``df.writeStream.format("firesteel.template")``."""

from __future__ import annotations

import dataclasses
import os

from firesteel.core.spi import ConfigError, SinkOptions, option

CONNECTOR = "firesteel.template"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TemplateSinkOptions(SinkOptions):
    """The sink's options (plus ``guarantee`` and ``sink.id`` from :class:`SinkOptions`)."""

    path: str = option(required=True, doc="the output directory (absolute)")

    def __post_init__(self) -> None:
        if not os.path.isabs(self.path):
            msg = (
                f"{CONNECTOR}: option 'path' must be absolute, got {self.path!r} (Spark runs "
                "Python workers in scratch directories of their own)"
            )
            raise ConfigError(msg)
