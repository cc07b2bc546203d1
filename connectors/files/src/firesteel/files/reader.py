"""Reading what the file sink committed: only files that a manifest lists.

A plain ``pyarrow.dataset.dataset(out)`` or ``spark.read.parquet(out)`` sees the
same data once the sink has recovered (they skip ``_firesteel/``); these
helpers are exact even before that, because they follow the manifests and read
a committed file from its pending name if a crash interrupted its rename.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa


def committed_files(path: str) -> list[str]:
    """Absolute paths of every file the manifests under ``path`` list, in commit order."""
    # Imported here: firesteel.files.sink imports this package (firesteel.core.durable).
    from firesteel.files.sink.manifest import committed_manifests

    out = Path(path)
    return [str(out / f.path) for m in committed_manifests(out) for f in m.files]


def _read_one(path: Path) -> pa.Table:
    if ".parquet" in path.name:
        import pyarrow.parquet as pq

        return pq.read_table(path)
    import pyarrow.json as pajson

    return pajson.read_json(pa.input_stream(str(path), compression="detect"))


def read_committed(path: str) -> pa.Table:
    """All committed rows under ``path`` as one table (empty table if nothing is committed)."""
    from firesteel.files.sink.manifest import committed_manifests

    out = Path(path)
    tables = []
    for manifest in committed_manifests(out):
        for item in manifest.files:
            final = out / item.path
            tables.append(_read_one(final if final.exists() else out / item.pending))
    if not tables:
        return pa.table({})
    return pa.concat_tables(tables, promote_options="permissive")
