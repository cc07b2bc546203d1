"""firesteel-rocksdb: the RocksDB state backend (work in progress)."""
