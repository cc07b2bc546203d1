"""The transactional file sink of ``firesteel.files``: see :mod:`firesteel.sinks.filesink.sink`."""

from firesteel.sinks.filesink.sink import FilesSink
from firesteel.sinks.filesink.writer import WriterConfig

__all__ = ["FilesSink", "WriterConfig"]
