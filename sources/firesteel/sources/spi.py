"""The source-framework interface a connector's source builds on.

Built on :mod:`firesteel.core.spi` (the :class:`~firesteel.core.spi.ResettableSource`
role), which a connector imports beside this module. A source that needs
records of its own beside its query's checkpoint (a pinned ``latest`` start,
bad-record counts that a replay replaces, never adds to) keeps them in a
:class:`SourceFolder`, written as versioned durable records on any filesystem;
a source with a folder of its own keeps its bad-record counts there the same
way (:class:`BadRecordCounts`).
"""

from firesteel.sources.bad_records import BadRecordCounts
from firesteel.sources.folder import SourceFolder

__all__ = ["BadRecordCounts", "SourceFolder"]
