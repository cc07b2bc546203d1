"""Reading what the file sink committed: only files that a manifest lists.

A plain ``pyarrow.dataset.dataset(out)`` or ``spark.read.parquet(out)`` sees the
same data once the sink has recovered (they skip ``_firesteel/``); these
helpers are exact even before that, because they follow the manifests and read
a committed file from its pending name if a crash interrupted its move.
``storage`` takes the same ``fs.*`` settings as the sink (``fs.s3a.endpoint``, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import pyarrow as pa

from firesteel.core.toolkit import Folder, StorageConfig

if TYPE_CHECKING:
    from firesteel.files.sink.manifest import Manifest


def _committed(path: str, storage: Mapping[str, str] | None) -> tuple[Folder, list[Manifest]]:
    # Imported here: firesteel.files.sink imports this package (firesteel.core.durable).
    from firesteel.files.sink.manifest import committed_manifests

    out = Folder(path, StorageConfig.of(storage or {}))
    return out, committed_manifests(out)


def committed_files(path: str, storage: Mapping[str, str] | None = None) -> list[str]:
    """Filesystem paths of every file the manifests under ``path`` list, in commit order."""
    out, manifests = _committed(path, storage)
    return [out.path(f.path) for m in manifests for f in m.files]


def _read_one(out: Folder, key: str) -> pa.Table:
    if ".parquet" in key:
        import pyarrow.parquet as pq

        return pq.read_table(out.path(key), filesystem=out.fs)
    import pyarrow.json as pajson

    with out.fs.open_input_stream(out.path(key), compression="detect") as stream:
        return pajson.read_json(stream)


def read_committed(path: str, storage: Mapping[str, str] | None = None) -> pa.Table:
    """All committed rows under ``path`` as one table (empty table if nothing is committed)."""
    out, manifests = _committed(path, storage)
    tables = [
        _read_one(out, item.path if out.exists(item.path) else item.pending)
        for manifest in manifests
        for item in manifest.files
    ]
    if not tables:
        return pa.table({})
    return pa.concat_tables(tables, promote_options="permissive")
