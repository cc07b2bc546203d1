"""The file source of ``firesteel.files``: see :mod:`firesteel.files.source.source`."""

from firesteel.files.source.source import FilesPartition, FilesSource

__all__ = ["FilesPartition", "FilesSource"]
