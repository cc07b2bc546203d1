"""firesteel-cassandra: Cassandra sinks, committer and lookups (work in progress)."""
