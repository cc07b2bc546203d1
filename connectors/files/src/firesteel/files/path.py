"""The ``path`` option both sides of the file connector declare: a folder on any store."""

from __future__ import annotations

from typing import Any

from firesteel.core.spi import option


def path_option(role: str) -> Any:
    """Declare the ``path`` option of a side of the connector (see
    :func:`~firesteel.core.options.option`); ``role`` says what the folder is to it."""
    return option(
        required=True,
        doc=f"{role}: an absolute path or a URI (s3a://bucket/prefix, gs://, abfss://); a "
        "store's fs.* settings (fs.s3a.endpoint, ...) are options too",
    )
