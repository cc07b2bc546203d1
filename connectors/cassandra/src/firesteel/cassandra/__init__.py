"""firesteel-cassandra: the upsert and write-ahead-log sinks (``format("firesteel.cassandra")``),
the Cassandra checkpoint committer, and :func:`lookup`, which enriches a DataFrame by key."""

from firesteel.cassandra.lookups import lookup

__all__ = ["lookup"]
