"""The transactional file sink of ``firesteel.files``: see :mod:`firesteel.sinks.files.sink`."""

from firesteel.sinks.files.sink import FilesSink
from firesteel.sinks.files.writer import WriterConfig

__all__ = ["FilesSink", "WriterConfig"]
