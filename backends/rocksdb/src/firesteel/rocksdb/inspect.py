"""Reading RocksDB checkpoints for debugging: the table of :mod:`firesteel.backends.inspect`.

``firesteel state <location>`` and :func:`firesteel.backends.inspect.read_state`
come here for operators whose ``_operator.json`` names the rocksdb backend.
Each manifest of the version is downloaded into a temporary folder (files
verified as on restore), opened read-only and scanned; entries become the same
rows the dict backends' snapshots give. Values written with pickle are shown as
hex, never unpickled.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pyarrow as pa

from firesteel.backends.spi import KeyGroupEntries, KeyGroupRange, StoredState
from firesteel.backends.toolkit import pack
from firesteel.core.spi import ConfigError
from firesteel.core.toolkit import StorageConfig
from firesteel.rocksdb import keys
from firesteel.rocksdb.local import LocalFolder, open_instance
from firesteel.rocksdb.manifest import Manifest
from firesteel.rocksdb.options import RocksDBOptions
from firesteel.rocksdb.storage import CheckpointStorage
from firesteel.rocksdb.store import BACKEND


def is_rocksdb_operator(location: str, operator: str, storage: StorageConfig | None = None) -> bool:
    """Whether ``operator``'s state under ``location`` was written by this backend."""
    meta = CheckpointStorage(location, operator, storage).metadata.read_metadata()
    return meta is not None and meta.get("backend") == BACKEND


def read_state(
    location: str,
    operator: str | None = None,
    batch: int | None = None,
    options: RocksDBOptions | None = None,
    storage: StorageConfig | None = None,
) -> pa.Table:
    """The RocksDB state under ``location`` as the table of
    :data:`firesteel.backends.inspect.SCHEMA` (``operator`` and ``batch`` as in
    :func:`firesteel.backends.inspect.read_state`)."""
    from firesteel.backends.toolkit import SCHEMA, list_operators

    names = (
        [operator]
        if operator
        else [
            name
            for name in list_operators(location, storage)
            if is_rocksdb_operator(location, name, storage)
        ]
    )
    tables = [
        read_operator(location, name, batch, options or RocksDBOptions(), storage) for name in names
    ]
    return pa.concat_tables(tables) if tables else SCHEMA.empty_table()


def read_operator(
    location: str,
    operator: str,
    batch: int | None,
    options: RocksDBOptions,
    config: StorageConfig | None = None,
) -> pa.Table:
    """One operator's state at version ``batch`` (default: the latest complete version)."""
    from firesteel.backends.toolkit import SCHEMA, stored_table

    stored = read_stored(location, operator, batch, options, config)
    return SCHEMA.empty_table() if stored is None else stored_table(stored)


def read_stored(
    location: str,
    operator: str,
    batch: int | None,
    options: RocksDBOptions,
    config: StorageConfig | None = None,
) -> StoredState | None:
    """One operator's entries at version ``batch`` (default: the latest complete version;
    None when there is none), still serialized: what a savepoint is made of."""
    from firesteel.backends.toolkit import chosen_version, recorded_operator

    storage = CheckpointStorage(location, operator, config)
    meta = recorded_operator(storage.metadata.read_metadata(), operator, location)
    if meta.get("backend") != BACKEND:
        msg = f"operator '{operator}' under {location} was not written by the rocksdb backend"
        raise ConfigError(msg)
    listing = storage.list_versions()
    batch = chosen_version(meta, listing, batch, operator=operator, location=location)
    if batch is None:
        return None
    manifests = storage.covering(batch, KeyGroupRange(0, int(meta["max_parallelism"]) - 1))
    kinds: dict[str, dict[str, Any]] = {}
    for manifest in manifests:
        kinds.update(manifest.states)
    return StoredState(operator, batch, meta, kinds, _key_groups(storage, manifests, options))


def _key_groups(
    storage: CheckpointStorage, manifests: list[Manifest], options: RocksDBOptions
) -> Iterator[tuple[int, KeyGroupEntries]]:
    """Each key group's entries, one manifest's instance downloaded and scanned at a time."""
    with tempfile.TemporaryDirectory(prefix="firesteel-inspect-") as scratch:
        folder = LocalFolder(Path(scratch))
        for manifest in sorted(manifests, key=lambda m: m.key_groups.start):
            target = folder.new_temp_dir()
            folder.materialize(manifest, storage, target, lambda: None)
            db = open_instance(target, options, read_only=True)
            try:
                yield from _scan(db, manifest)
            finally:
                db.close()


def _split(rest: bytes) -> tuple[bytes, bytes]:
    """The msgpack grouping key at the start of ``rest``, and what follows it."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(rest)
    unpacker.skip()
    end = unpacker.tell()
    return rest[:end], rest[end:]


def _scan(db: Any, manifest: Manifest) -> Iterator[tuple[int, KeyGroupEntries]]:
    """The instance's key groups in order (stored keys begin with their key group)."""
    names = {keys.state_id(name): name for name in manifest.states}
    start = keys.key_group_prefix(manifest.key_groups.start)
    end = keys.key_group_prefix(manifest.key_groups.end + 1)
    current: int | None = None
    tables: KeyGroupEntries = {}
    for stored_key, stored in db.items(from_key=start):
        if stored_key >= end:
            break
        key_group = keys.key_group_of(stored_key)
        if key_group != current:
            if current is not None and tables:
                yield current, tables
            current, tables = key_group, {}
        state_id = stored_key[keys.KEY_GROUP_BYTES : keys.PREFIX_BYTES]
        rest = stored_key[keys.PREFIX_BYTES :]
        if state_id == keys.TIMERS_BY_KEY:
            packed, stamp = rest[: -keys.STAMP_BYTES], rest[-keys.STAMP_BYTES :]
            timers = tables.setdefault(keys.TIMERS, {})
            timers.setdefault(packed, {})[pack(keys.unstamp(stamp))] = None
            continue
        name = names.get(state_id)
        if name is None:
            continue
        kind = manifest.states[name]["kind"]
        table = tables.setdefault(name, {})
        data, expires = keys.decode_value(stored)
        if kind == "value":
            table[rest] = (data, expires)
        elif kind == "list":
            table.setdefault(rest[: -keys.STAMP_BYTES], []).append((data, expires))
        else:
            packed, user_key = _split(rest)
            table.setdefault(packed, {})[user_key] = (data, expires)
    if current is not None and tables:
        yield current, tables
