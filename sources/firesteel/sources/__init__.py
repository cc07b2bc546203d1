"""What every resettable source shares beyond the core protocol (:mod:`firesteel.core.source`).

:mod:`firesteel.sources.folder` keeps a source's own durable records beside its
query's checkpoint. Each connector's source lives in its connector's folder
(``connectors/files``, ``connectors/kafka``).
"""
