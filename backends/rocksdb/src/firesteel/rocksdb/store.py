"""The keyed state store of the RocksDB backend: a local instance, incremental checkpoints.

One store holds one key-group range of one operator in one Python worker, in
a local RocksDB instance (layout: :mod:`firesteel.rocksdb.keys`). The task of
batch N, in order (see :mod:`firesteel.state.backend` for the protocol):

1. **Restore version N-1** (the latest committed one; Spark runs N only after
   N-1 committed). The manifests of N-1 covering the task's key groups are
   listed, then, cheapest first:

   a. the instance already holds N-1 -- this worker wrote the very manifest
      that is committed (same attempt id) and no failed task changed it since:
      it is used as it is;
   b. this worker wrote that manifest but a failed task changed the instance:
      it is rebuilt from the local checkpoint of N-1 (hard links);
   c. otherwise the manifest covering most of the range is materialized
      (downloading only the SST files the local cache lacks, checking each
      one's size and checksum), key groups outside the range are deleted
      (scale-out), and the other manifests' key groups are copied in from
      temporary read-only instances (scale-in).

   The instance then runs with the write-ahead log off (see :mod:`firesteel.rocksdb.states`).
2. **Process**: state objects read and write the instance directly.
3. **Snapshot N**: expired TTL entries of one round of key groups are
   deleted; an instance none of whose files are in storage yet (the query's
   first batch) is compacted into one sorted run, since all of it is uploaded
   anyway; then a RocksDB checkpoint (memtables flushed, SSTs hard-linked) is
   taken on the task thread; a background thread uploads every SST the
   restored manifest does not list (new names, unique to this attempt), the
   small private files, and finally the manifest. Then leftovers of failed
   attempts of N overlapping this range are removed and, in partition 0,
   versions older than the retained ones and the shared files no retained
   version lists are deleted (:mod:`firesteel.rocksdb.storage`).
4. **On failure** the instance is marked changed: the next task rebuilds it (1b or 1c).

Only SSTs listed by the committed manifest the instance was restored from are
reused by the next upload (Flink's FLINK-25395 lesson): an attempt's own
uploads become reusable only once its manifest is the committed one.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from firesteel.backends.spi import (
    Key,
    KeyedTask,
    KeyGroupRange,
    OperatorSpec,
    PendingSnapshot,
    StateDeclarations,
    StateDescriptor,
    TaskStore,
)
from firesteel.backends.toolkit import (
    SnapshotThread,
    StateUpgrade,
    check_declared,
    check_owner,
    key_packer,
    state_record,
    undeclared_state,
    unpack_key,
)
from firesteel.core.faults import fault_point
from firesteel.core.spi import CheckpointCorruptError, ConfigError
from firesteel.rocksdb import keys
from firesteel.rocksdb.local import LocalFolder, clone, open_instance
from firesteel.rocksdb.manifest import Manifest, StoredFile, shared_name
from firesteel.rocksdb.options import RocksDBOptions
from firesteel.rocksdb.states import Cursor, make_state
from firesteel.rocksdb.storage import CheckpointStorage

logger = logging.getLogger(__name__)

BACKEND = "rocksdb"
MID_UPLOAD = fault_point(
    "rocksdb.mid_upload", "the first file of a snapshot was uploaded, before its manifest"
)
MID_RESTORE = fault_point(
    "rocksdb.mid_restore", "the first file of a restore was downloaded, before the instance opens"
)
_MERGE_CHUNK = 10_000
SWEEP_ROUNDS = 8
"""Batches in which every TTL entry is checked once (see ``_sweep_expired``)."""


@dataclass
class _Base:
    """The committed state the instance equals when no task has changed it."""

    manifest: Manifest
    checkpoint: Path
    """The local RocksDB checkpoint the manifest was uploaded from."""


class RocksDBKeyedStore(TaskStore):
    """State of one key-group range in a local RocksDB instance (see module docs)."""

    def __init__(
        self,
        storage: CheckpointStorage,
        spec: OperatorSpec,
        key_groups: KeyGroupRange,
        *,
        folder: LocalFolder,
        options: RocksDBOptions,
        retain: int,
        cached: bool,
    ) -> None:
        super().__init__(spec, Cursor(), retain=retain)
        self.storage = storage
        self.key_groups = key_groups
        self.folder = folder
        self.options = options
        self.cached = cached
        self.db: Any = None
        self._instance_dir: Path | None = None
        self.base: _Base | None = None
        self.reusable: dict[str, StoredFile] = {}
        """Local SST name -> its stored copy, from the committed manifest restored from."""
        self.stored_states: dict[str, dict[str, str]] = {}
        """The states (kind, serializer) the instance holds."""
        self.parents: tuple[str, ...] = ()
        self.changed = False
        """A task wrote to the instance since it last equalled a committed version."""
        self.downloads = 0
        """Files downloaded by the last restore (0 when the instance was reused)."""
        self._prefixes = [keys.key_group_prefix(kg) for kg in range(spec.max_parallelism)]
        self._pack = key_packer()
        self._has_key = False
        self._written: dict[str, float] = {}
        self._entries_estimate: int | None = None

    # -- task lifecycle ---------------------------------------------------------------------

    def begin(self, task: KeyedTask, declared: StateDeclarations, now_ms: int) -> None:
        descriptors = declared.by_name()
        ids = keys.check_ids(list(descriptors))
        self._pack = key_packer()
        self._check_metadata(task)
        self._restore(task)
        self._check_states(descriptors, frozenset(declared.dropped))
        self.descriptors = descriptors
        self.cursor.db = self.db
        by_name = {name: state_id for state_id, name in ids.items()}
        self._states = {
            name: make_state(d, self.cursor, by_name[name]) for name, d in descriptors.items()
        }
        self._task = task
        self._has_key = False
        self.cursor.now_ms = now_ms
        self.cursor.sequence = task.scope.batch_id << 32
        self.changed = True

    def _check_metadata(self, task: KeyedTask) -> None:
        if self._metadata is None:
            self._metadata = self.storage.metadata.read_metadata()
        meta = self._metadata
        spec = self.spec
        where = self.storage.describe(self.storage.path("_operator.json"))
        if meta is None:
            if self.storage.list_versions():
                msg = f"{where} is missing but state checkpoints exist beside it; restore it"
                raise CheckpointCorruptError(msg)
            meta = {
                "operator": spec.name,
                "backend": BACKEND,
                "query_id": task.scope.query_id,
                "first_batch": task.scope.batch_id,
                "max_parallelism": spec.max_parallelism,
                "key": list(spec.key_columns),
            }
            self.storage.metadata.write_metadata(meta)
            self._metadata = meta
            return
        if meta.get("backend") != BACKEND:
            writer = meta.get("backend") or "heap or filesystem"
            self._metadata = None
            msg = (
                f"operator '{spec.name}': the state at {where} was written by the {writer} "
                "backend (snapshot files *.snap), which the rocksdb backend cannot read; use "
                "that backend, or give this query a fresh state location or operator name"
            )
            raise ConfigError(msg)
        check_owner(meta, spec, task, where)

    def _restore(self, task: KeyedTask) -> None:
        self.downloads = 0
        if task.scope.batch_id == self.first_batch:
            self._replace_instance(None)
            if self.base is not None:
                self.folder.remove(self.base.checkpoint)
            self.base, self.reusable, self.stored_states, self.parents = None, {}, {}, ()
            return
        manifests = self.storage.covering(task.scope.batch_id - 1, self.key_groups)
        base = self.base
        if (
            len(manifests) == 1
            and base is not None
            and manifests[0].relative_path == base.manifest.relative_path
        ):
            if self.changed:
                self._replace_instance(base.checkpoint)
                logger.debug("state: %s rolled back to its checkpoint", self._label())
            return
        self._restore_from(manifests, task)

    def _restore_from(self, manifests: list[Manifest], task: KeyedTask) -> None:
        """Case 1c of the module docs."""
        wanted = self.key_groups
        primary = max(manifests, key=lambda m: _overlap(m.key_groups, wanted))
        first = [True]

        def downloaded() -> None:
            if first[0]:
                first[0] = False
                MID_RESTORE.fire(task.scope.batch_id, task.scope.partition_id)

        exact = len(manifests) == 1 and primary.key_groups == wanted
        previous = self.base
        if exact:
            # Materialized as a checkpoint folder, so a failed task rolls back without downloads.
            checkpoint = self.folder.checkpoint_dir(primary.version, primary.attempt)
            self.folder.remove(checkpoint)
            self.downloads = self.folder.materialize(primary, self.storage, checkpoint, downloaded)
            self._replace_instance(checkpoint)
            self.base = _Base(primary, checkpoint)
        else:
            target = self.folder.new_instance_dir()
            self.downloads = self.folder.materialize(primary, self.storage, target, downloaded)
            self._replace_instance(None, prepared=target)
            self.base = None
            if primary.key_groups != wanted:
                self._drop_outside(wanted)
            for other in manifests:
                if other is not primary:
                    self.downloads += self._merge(other, wanted, downloaded)
        kept = self.base.checkpoint if self.base is not None else None
        if previous is not None and previous.checkpoint != kept:
            self.folder.remove(previous.checkpoint)
        self.reusable = {f.local: f for f in primary.shared_files}
        states: dict[str, dict[str, str]] = {}
        for manifest in manifests:
            states.update(manifest.states)
        self.stored_states = states
        self.parents = tuple(m.relative_path for m in manifests)
        self.folder.prune({f.path for m in manifests for f in m.shared_files})
        logger.info(
            "state: %s restored version %d from %d manifest(s), %d file(s) downloaded",
            self._label(),
            primary.version,
            len(manifests),
            self.downloads,
        )

    def _drop_outside(self, wanted: KeyGroupRange) -> None:
        if wanted.start > 0:
            self.db.delete_range(keys.key_group_prefix(0), keys.key_group_prefix(wanted.start))
        self.db.delete_range(keys.key_group_prefix(wanted.end + 1), keys.END_OF_KEY_GROUPS)

    def _merge(self, manifest: Manifest, wanted: KeyGroupRange, downloaded: Any) -> int:
        """Copy ``manifest``'s key groups inside ``wanted`` into the instance (scale-in)."""
        import rocksdict as rd

        temporary = self.folder.new_temp_dir()
        count = self.folder.materialize(manifest, self.storage, temporary, downloaded)
        source = open_instance(temporary, self.options, read_only=True)
        try:
            start = keys.key_group_prefix(max(wanted.start, manifest.key_groups.start))
            end = keys.key_group_prefix(min(wanted.end, manifest.key_groups.end) + 1)
            batch = rd.WriteBatch(raw_mode=True)
            for stored_key, stored in source.items(from_key=start):
                if stored_key >= end:
                    break
                batch.put(stored_key, stored)
                if len(batch) >= _MERGE_CHUNK:
                    self.db.write(batch)
                    batch = rd.WriteBatch(raw_mode=True)
            if len(batch):
                self.db.write(batch)
        finally:
            source.close()
            self.folder.remove(temporary)
        return count

    def _replace_instance(self, checkpoint: Path | None, *, prepared: Path | None = None) -> None:
        """Close the open instance and open a new one: empty, a clone of ``checkpoint``, or the
        already materialized folder ``prepared``."""
        self._close_instance()
        target = prepared or self.folder.new_instance_dir()
        if prepared is None and checkpoint is not None:
            clone(checkpoint, target)
        self.db = open_instance(target, self.options)
        self._instance_dir = target
        self.changed = False

    def _close_instance(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None
        self.folder.remove(self._instance_dir)
        self._instance_dir = None

    def _check_states(self, declared: dict[str, StateDescriptor], dropped: frozenset[str]) -> None:
        """Refuse stored states the declarations do not match, all of them before the
        instance changes; then delete the dropped ones and rewrite evolved ones."""
        where = self.storage.describe(self.storage.path(self.parents[0])) if self.parents else ""
        to_drop: list[str] = []
        upgrades: list[StateUpgrade] = []
        for name, info in self.stored_states.items():
            desc = declared.get(name)
            if desc is None:
                if name not in dropped:
                    raise undeclared_state(self.spec.name, name, info, f"checkpoint {where}")
                to_drop.append(name)
                continue
            found = check_declared(self.spec.name, name, info, desc, where)
            if found is not None:
                upgrades.append(found)
        for name in to_drop:
            self._delete_state(name)
            del self.stored_states[name]
        for found in upgrades:
            self._upgrade_state(found, declared[found.state])

    def _upgrade_state(self, found: StateUpgrade, desc: StateDescriptor) -> None:
        """Rewrite every stored value of a state whose schema evolved (expiry kept), as
        Flink's RocksDB backend migrates state on restore; the next checkpoint uploads it."""
        import rocksdict as rd

        state_id = keys.state_id(found.state)
        dumps = desc.value_serializer.dumps
        rewritten = 0
        for key_group in self.key_groups:
            prefix = self._prefixes[key_group] + state_id
            batch = rd.WriteBatch(raw_mode=True)
            for stored_key, stored in self.db.items(from_key=prefix):
                if not stored_key.startswith(prefix):
                    break
                data, expires = keys.decode_value(stored)
                batch.put(stored_key, keys.encode_value(dumps(found.loads(data)), expires))
                if len(batch) >= _MERGE_CHUNK:
                    rewritten += len(batch)
                    self.db.write(batch)
                    batch = rd.WriteBatch(raw_mode=True)
            if len(batch):
                rewritten += len(batch)
                self.db.write(batch)
        self.changed = True
        logger.info(
            "state: %s rewrote %d value(s) of state %s to its declared schema",
            self._label(),
            rewritten,
            found.state,
        )

    def _delete_state(self, name: str) -> None:
        import rocksdict as rd

        state_id = keys.state_id(name)
        batch = rd.WriteBatch(raw_mode=True)
        for key_group in self.key_groups:
            prefix = self._prefixes[key_group] + state_id
            batch.delete_range(prefix, keys.successor(prefix))
        self.db.write(batch)
        self.changed = True

    def discard(self) -> None:
        self._task = None
        self._has_key = False
        # Whatever failed, the instance may differ from its base now: rebuild it next time.
        self.changed = True
        if not self.cached:
            self.close()

    def close(self) -> None:
        """Close the instance and delete every local file of this store."""
        self._close_instance()
        self.base = None
        self.folder.delete()

    # -- state access -----------------------------------------------------------------------

    def set_current_key(self, key: Key, key_group: int) -> None:
        cursor = self.cursor
        cursor.key = key
        cursor.key_group = self._prefixes[key_group]
        cursor.packed = self._pack(key)
        self._has_key = True

    def _timer_keys(self, timestamp_ms: int) -> tuple[bytes, bytes]:
        if not self._has_key:
            msg = "timers can only be used while a key is being processed"
            raise RuntimeError(msg)
        cursor = self.cursor
        stamp = keys.stamp(int(timestamp_ms))
        return (
            cursor.key_group + keys.TIMERS_BY_TIME + stamp + cursor.packed,
            cursor.key_group + keys.TIMERS_BY_KEY + cursor.packed + stamp,
        )

    def register_timer(self, timestamp_ms: int) -> None:
        by_time, by_key = self._timer_keys(timestamp_ms)
        self.db.put(by_time, b"")
        self.db.put(by_key, b"")

    def delete_timer(self, timestamp_ms: int) -> None:
        by_time, by_key = self._timer_keys(timestamp_ms)
        self.db.delete(by_time)
        self.db.delete(by_key)

    def timers(self) -> list[int]:
        if not self._has_key:
            msg = "timers can only be used while a key is being processed"
            raise RuntimeError(msg)
        cursor = self.cursor
        prefix = cursor.key_group + keys.TIMERS_BY_KEY + cursor.packed
        found = []
        for stored_key in self.db.keys(from_key=prefix):
            if not stored_key.startswith(prefix):
                break
            found.append(keys.unstamp(stored_key[len(prefix) :]))
        return found

    def pop_due_timers(self, now_ms: int) -> list[tuple[int, int, Key]]:
        import rocksdict as rd

        due: list[tuple[int, int, Key]] = []
        batch = rd.WriteBatch(raw_mode=True)
        start = keys.PREFIX_BYTES
        end = start + keys.STAMP_BYTES
        for key_group in self.task.key_groups:
            group = self._prefixes[key_group]
            prefix = group + keys.TIMERS_BY_TIME
            for stored_key in self.db.keys(from_key=prefix):
                if not stored_key.startswith(prefix):
                    break
                timestamp = keys.unstamp(stored_key[start:end])
                if timestamp > now_ms:
                    break
                packed = stored_key[end:]
                due.append((timestamp, key_group, unpack_key(packed)))
                batch.delete(stored_key)
                batch.delete(group + keys.TIMERS_BY_KEY + packed + stored_key[start:end])
        if len(batch):
            self.db.write(batch)
        due.sort(key=lambda item: (item[0], item[1]))
        return due

    # -- snapshot ---------------------------------------------------------------------------

    def snapshot(self) -> PendingSnapshot:
        import rocksdict as rd

        task = self.task
        self._has_key = False
        self._sweep_expired(task)
        if not self.reusable:
            # Storage holds none of this instance's files, so every file goes up anyway:
            # merged first, the base is one sorted run, which later merges of the small
            # runs of each batch leave alone (with several, universal compaction soon
            # merges them all, and the next checkpoint uploads the whole state again).
            self.db.compact_range(None, None)
        # RocksDB's own estimate from its table properties and memtables: no scan, so it
        # counts an overwritten or deleted entry not yet compacted away.
        self._entries_estimate = self.db.property_int_value("rocksdb.estimate-num-keys")
        attempt = uuid.uuid4().hex[:16]
        checkpoint = self.folder.checkpoint_dir(task.scope.batch_id, attempt)
        rd.Checkpoint(self.db).create_checkpoint(str(checkpoint))
        states = {name: state_record(d) for name, d in self.descriptors.items()}
        return SnapshotThread(lambda: self._upload(task, attempt, checkpoint, states))

    def _sweep_expired(self, task: KeyedTask) -> None:
        """Delete expired entries of TTL states in every :data:`SWEEP_ROUNDS`-th key group.

        rocksdict offers no compaction filter, so entries nobody reads again
        would stay forever; instead each batch scans the TTL states of one
        round of key groups (``key group % SWEEP_ROUNDS == batch % SWEEP_ROUNDS``),
        so every entry is checked at least once every ``SWEEP_ROUNDS`` batches.
        """
        import rocksdict as rd

        expiring = [keys.state_id(d.name) for d in self.descriptors.values() if d.ttl_config]
        if not expiring:
            return
        now = self.cursor.now_ms
        round_ = task.scope.batch_id % SWEEP_ROUNDS
        batch = rd.WriteBatch(raw_mode=True)
        for key_group in task.key_groups:
            if key_group % SWEEP_ROUNDS != round_:
                continue
            for state_id in expiring:
                prefix = self._prefixes[key_group] + state_id
                for stored_key, stored in self.db.items(from_key=prefix):
                    if not stored_key.startswith(prefix):
                        break
                    expires = keys.decode_value(stored)[1]
                    if expires is not None and expires <= now:
                        batch.delete(stored_key)
        if len(batch):
            logger.debug("state: %s swept %d expired entries", self._label(), len(batch))
            self.db.write(batch)

    def _upload(
        self, task: KeyedTask, attempt: str, checkpoint: Path, states: dict[str, dict[str, str]]
    ) -> None:
        try:
            manifest = self._write_checkpoint(task, attempt, checkpoint, states)
        except BaseException:
            self.folder.remove(checkpoint)
            raise
        previous = self.base
        self.base = _Base(manifest, checkpoint)
        self.reusable = {f.local: f for f in manifest.shared_files}
        self.stored_states = dict(states)
        self.parents = (manifest.relative_path,)
        self.changed = False
        keep = {f.path for f in manifest.shared_files}
        if previous is not None:
            self.folder.remove(previous.checkpoint)
            keep.update(f.path for f in previous.manifest.shared_files)
        self.folder.prune(keep)
        if task.scope.partition_id == 0:
            self._apply_retention(task.scope.batch_id - 1)
        if not self.cached:
            self.close()

    def _write_checkpoint(
        self, task: KeyedTask, attempt: str, checkpoint: Path, states: dict[str, dict[str, str]]
    ) -> Manifest:
        files: list[StoredFile] = []
        uploaded = 0
        bytes_uploaded = 0
        manifest = Manifest(
            operator=self.spec.name,
            version=task.scope.batch_id,
            key_groups=self.key_groups,
            attempt=attempt,
            query_id=task.scope.query_id,
            max_parallelism=self.spec.max_parallelism,
            states=states,
            files=(),
            parents=self.parents,
            written_ns=time.time_ns(),
        )
        private = manifest.private_dir
        for entry in sorted(checkpoint.iterdir()):
            if entry.name.endswith(".sst"):
                reused = self.reusable.get(entry.name)
                if reused is not None and reused.size == entry.stat().st_size:
                    files.append(reused)
                    continue
                relative = f"shared/{shared_name(task.scope.batch_id, attempt, entry.name)}"
                stored = self.storage.upload(entry, relative)
                self.folder.remember(entry, relative)
            else:
                stored = self.storage.upload(entry, f"{private}/{entry.name}")
            files.append(stored)
            uploaded += 1
            bytes_uploaded += stored.size
            if uploaded == 1:
                MID_UPLOAD.fire(task.scope.batch_id, task.scope.partition_id)
        manifest = dataclasses.replace(manifest, files=tuple(files))
        self.storage.write_manifest(manifest)
        # Incremental: the state's bytes are every file of the version, written now or
        # by an earlier batch; only those uploaded now were written.
        self._written = {
            "snapshot_bytes": float(bytes_uploaded),
            "state_bytes": float(sum(f.size for f in files)),
        }
        self.storage.remove_stale(manifest)
        logger.debug(
            "state: %s wrote version %d: %d of %d files uploaded (%d bytes)",
            self._label(),
            task.scope.batch_id,
            uploaded,
            len(files),
            bytes_uploaded,
        )
        return manifest

    def snapshot_metrics(self) -> dict[str, float]:
        """Bytes of the files uploaded and of every file the version lists (the manifest
        aside), so ``snapshot_bytes / state_bytes`` is the incremental share, and
        ``state_entries_estimate``: RocksDB's ``rocksdb.estimate-num-keys`` of the instance
        when the snapshot was taken (every value, list element, map entry and timer,
        firesteel's own included), an estimate that counts entries overwritten or deleted
        since the last compaction; an exact count reads every entry (``firesteel status
        --state LOCATION --keys``)."""
        figures = dict(self._written)
        if self._entries_estimate is not None:
            figures["state_entries_estimate"] = float(self._entries_estimate)
        return figures

    def _apply_retention(self, last_committed: int) -> None:
        oldest_kept = last_committed - self.retain + 1
        if oldest_kept <= self.first_batch:
            return
        dropped, deleted = self.storage.collect_garbage(oldest_kept)
        if dropped or deleted:
            logger.info(
                "state: operator %s dropped %d version(s) before %d and %d unused file(s)",
                self.spec.name,
                dropped,
                oldest_kept,
                deleted,
            )

    def _label(self) -> str:
        return f"operator {self.spec.name} key groups {self.key_groups.label}"


def _overlap(a: KeyGroupRange, b: KeyGroupRange) -> int:
    return max(0, min(a.end, b.end) - max(a.start, b.start) + 1)


MAX_CACHED_STORES = 8
"""Stores a worker keeps open between tasks; the least recently used beyond it is closed."""
