"""firesteel-rocksdb: keyed state in local RocksDB instances with incremental checkpoints.

::

    from firesteel.rocksdb import RocksDBBackend, RocksDBOptions

    backend = RocksDBBackend("s3://bucket/state", options=RocksDBOptions(memory_budget=256 << 20))
    out = stateful(df, key="user", processor=MyProcessor(), output_schema=..., backend=backend)

Also found by name (``rocksdb``) through the entry point group ``firesteel.backends``.
"""

from firesteel.rocksdb.backend import RocksDBBackend
from firesteel.rocksdb.options import RocksDBOptions

__all__ = ["RocksDBBackend", "RocksDBOptions"]
