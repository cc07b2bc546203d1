"""The file connector, format ``firesteel.files``: file source and transactional file sink.

``committed_files`` and ``read_committed`` read exactly what the sink committed.
"""

from firesteel.files.reader import committed_files, read_committed

__all__ = ["committed_files", "read_committed"]
