"""The file source of ``firesteel.files``: see :mod:`firesteel.sources.filesource.source`."""

from firesteel.sources.filesource.source import FilesPartition, FilesSource

__all__ = ["FilesPartition", "FilesSource"]
