"""The file source of ``firesteel.files``: see :mod:`firesteel.sources.files.source`."""

from firesteel.sources.files.source import FilesPartition, FilesSource

__all__ = ["FilesPartition", "FilesSource"]
