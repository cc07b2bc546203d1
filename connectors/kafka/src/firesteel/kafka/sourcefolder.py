"""Where a Kafka source keeps its pinned start and error counts: :mod:`firesteel.sources.folder`."""

from __future__ import annotations

from firesteel.kafka.options import KafkaSourceOptions
from firesteel.sources.spi import SourceFolder


def source_folder(options: KafkaSourceOptions) -> SourceFolder | None:
    """The folder of the Kafka source with these options, named by what it subscribes to;
    ``None`` without option ``checkpointLocation``."""
    if options.checkpoint_location is None:
        return None
    subscription = (
        f"topics {','.join(sorted(options.topics))}"
        if options.subscribe
        else f"pattern {options.subscribe_pattern}"
    )
    return SourceFolder("kafka", options.checkpoint_location, subscription)
