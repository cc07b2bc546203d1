"""The transactional file sink of ``firesteel.files``: see :mod:`firesteel.files.sink.sink`."""

from firesteel.files.sink.sink import FilesSink
from firesteel.files.sink.writer import WriterConfig

__all__ = ["FilesSink", "WriterConfig"]
