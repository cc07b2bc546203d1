"""The keyed state store of the heap and filesystem backends: dicts in memory, snapshot files.

Versions and commits (the rules that make state exactly-once):

1. The task of batch N for operator partition p owns key groups
   ``KeyGroupRange.for_partition(p)`` and restores them to version N-1, the
   latest committed one: Spark runs batch N only after batch N-1 committed,
   and re-runs a failed batch before any later one. A re-run of N therefore
   never sees what a failed attempt of N wrote.
2. It writes version N as *one* file per task, even when nothing changed, so
   every committed version covers every key group and a lost file is detected
   (restore expects exactly one file per version and key group).
3. A re-run of N overwrites version N: its file replaces the failed attempt's
   (same range) or deletes overlapping leftovers (another parallelism).
4. Full snapshots every ``full_snapshot_every`` versions, deltas in between.
   Retention keeps at least the last ``retain`` committed versions and the
   full snapshot they build on; the task of partition 0 deletes older ones.

Worker memory: Spark reuses Python workers, so a store stays in its worker
between tasks (like Spark's state store cache). Before reusing a key group, the
task checks that the committed file of version N-1 for it is the very file
this worker wrote (file names carry the digest of their content); otherwise
it reloads, or applies the deltas it lacks. A failed task drops what it had
changed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from firesteel.backends import format as fmt
from firesteel.backends.async_snapshot import SnapshotThread
from firesteel.backends.heap.rows import BodyWriter, RowApplier
from firesteel.backends.heap.states import TIMERS, Cursor, KeyGroupState, make_state
from firesteel.backends.storage import (
    DELTA,
    FULL,
    SnapshotFile,
    SnapshotStorage,
    plan_restore,
)
from firesteel.backends.store_base import (
    TaskStore,
    check_declared,
    check_owner,
    state_record,
    undeclared_state,
)
from firesteel.core.spi import CheckpointCorruptError
from firesteel.state.backend import (
    Key,
    KeyedTask,
    OperatorSpec,
    PendingSnapshot,
    StateDeclarations,
)
from firesteel.state.descriptors import StateDescriptor
from firesteel.state.schemas import StateUpgrade, recorded

logger = logging.getLogger(__name__)


def fingerprint(descriptors: Sequence[StateDescriptor]) -> tuple[Any, ...]:
    """What must not change for decoded in-memory state to stay valid."""
    return tuple(
        sorted(
            (
                d.name,
                d.kind.value,
                d.ttl_config.millis if d.ttl_config else None,
                d.value_serializer.name,
                getattr(d.type, "__qualname__", None),
                recorded(d.schema),
            )
            for d in descriptors
        )
    )


class HeapKeyedStore(TaskStore):
    """Dict-backed state for the key groups of the tasks a worker runs (see module docs)."""

    def __init__(
        self,
        storage: SnapshotStorage,
        spec: OperatorSpec,
        *,
        retain: int,
        full_snapshot_every: int,
    ) -> None:
        super().__init__(spec, Cursor(), retain=retain)
        self.storage = storage
        self.full_snapshot_every = full_snapshot_every
        self.groups: dict[int, KeyGroupState] = {}
        self.identity: dict[int, tuple[int, str]] = {}
        """key group -> (version, file name) its in-memory state is equal to."""
        self._fingerprint: tuple[Any, ...] = ()
        self._dropped: frozenset[str] = frozenset()
        self._group: KeyGroupState | None = None
        self._written: dict[str, float] = {}

    # -- task lifecycle ---------------------------------------------------------------------

    def begin(self, task: KeyedTask, declared: StateDeclarations, now_ms: int) -> None:
        marks = fingerprint(declared.descriptors)
        if marks != self._fingerprint:
            self.groups.clear()
            self.identity.clear()
            self._fingerprint = marks
        self.descriptors = declared.by_name()
        self._states = {name: make_state(d, self.cursor) for name, d in self.descriptors.items()}
        self._dropped = frozenset(declared.dropped)
        self._task = task
        self.cursor.now_ms = now_ms
        self._check_metadata(task)
        self._restore(task)

    def _check_metadata(self, task: KeyedTask) -> None:
        if self._metadata is None:
            self._metadata = self.storage.read_metadata()
        meta = self._metadata
        spec = self.spec
        where = self.storage.describe(f"{self.storage.base}/_operator.json")
        if meta is None:
            if self.storage.list_versions():
                msg = f"{where} is missing but state snapshots exist beside it; restore it"
                raise CheckpointCorruptError(msg)
            meta = {
                "operator": spec.name,
                "query_id": task.scope.query_id,
                "first_batch": task.scope.batch_id,
                "max_parallelism": spec.max_parallelism,
                "key": list(spec.key_columns),
            }
            self.storage.write_metadata(meta)
            self._metadata = meta
            return
        check_owner(meta, spec, task, where)

    def _new_group(self) -> KeyGroupState:
        return KeyGroupState(self.descriptors)

    def _restore(self, task: KeyedTask) -> None:
        if task.scope.batch_id == self.first_batch:
            for key_group in task.key_groups:
                self.groups[key_group] = self._new_group()
                self.identity.pop(key_group, None)
            return
        listing = self.storage.list_versions()
        plans = plan_restore(
            self.storage,
            listing,
            task.key_groups,
            task.scope.batch_id - 1,
            first_version=self.first_batch,
            in_memory=self.identity,
        )
        needed: dict[str, tuple[SnapshotFile, set[int]]] = {}
        for key_group, plan in plans.items():
            if plan.from_memory:
                self.groups[key_group].ensure(self.descriptors)
            else:
                self.groups[key_group] = self._new_group()
            for file in plan.files:
                needed.setdefault(file.path, (file, set()))[1].add(key_group)
        applier = RowApplier(self.descriptors, self.cursor.now_ms)
        for file, key_groups in sorted(needed.values(), key=lambda item: item[0].version):
            self._apply_file(applier, file, key_groups)
        for key_group in task.key_groups:
            covering = [f for f in listing[task.scope.batch_id - 1] if key_group in f.key_groups]
            self.identity[key_group] = (task.scope.batch_id - 1, covering[0].name)
        if needed:
            logger.info(
                "state: operator %s restored key groups %s from %d file(s)",
                self.spec.name,
                task.key_groups.label,
                len(needed),
            )

    def _apply_file(self, applier: RowApplier, file: SnapshotFile, key_groups: set[int]) -> None:
        snapshot = self.storage.read(file)
        where = self.storage.describe(file.path)
        states: dict[str, dict[str, str]] = snapshot.header.get("states", {})
        upgrades: dict[str, StateUpgrade] = {}
        for name, info in states.items():
            desc = self.descriptors.get(name)
            if desc is None:
                if name in self._dropped:
                    continue
                raise undeclared_state(self.spec.name, name, info, f"snapshot {where}")
            found = check_declared(self.spec.name, name, info, desc, where)
            if found is not None:
                upgrades[name] = found
        rows = snapshot.rows
        groups_col = rows.column("key_group").to_pylist()
        state_col = rows.column("state").to_pylist()
        ops = rows.column("op").to_pylist()
        keys = rows.column("key").to_pylist()
        user_keys = rows.column("user_key").to_pylist()
        values = rows.column("value").to_pylist()
        expires = rows.column("expires_ms").to_pylist()
        total = len(ops)
        start = 0
        while start < total:
            key_group, state = groups_col[start], state_col[start]
            end = start + 1
            while end < total and groups_col[end] == key_group and state_col[end] == state:
                end += 1
            if key_group in key_groups and (state == TIMERS or state in self.descriptors):
                upgraded = upgrades.get(state)
                applier.apply(
                    self.groups[key_group],
                    state,
                    ops[start:end],
                    keys[start:end],
                    user_keys=user_keys[start:end],
                    values=values[start:end],
                    expires=expires[start:end],
                    load=upgraded.loads if upgraded is not None else None,
                )
            start = end

    def discard(self) -> None:
        if self._task is None:
            return
        for key_group in self._task.key_groups:
            self.groups.pop(key_group, None)
            self.identity.pop(key_group, None)
        self._task = None

    # -- state access -----------------------------------------------------------------------

    def set_current_key(self, key: Key, key_group: int) -> None:
        group = self.groups[key_group]
        cursor = self.cursor
        cursor.key = key
        cursor.slots = group.slots
        self._group = group

    def _current_group(self) -> KeyGroupState:
        if self._group is None:
            msg = "timers can only be used while a key is being processed"
            raise RuntimeError(msg)
        return self._group

    def register_timer(self, timestamp_ms: int) -> None:
        group = self._current_group()
        if group.add_timer(self.cursor.key, int(timestamp_ms)):
            group.timers.changed.add(self.cursor.key)

    def delete_timer(self, timestamp_ms: int) -> None:
        group = self._current_group()
        pending = group.timers.table.get(self.cursor.key)
        if pending is None or timestamp_ms not in pending:
            return
        pending.discard(timestamp_ms)
        if not pending:
            del group.timers.table[self.cursor.key]
        group.timers.changed.add(self.cursor.key)

    def timers(self) -> list[int]:
        return sorted(self._current_group().timers.table.get(self.cursor.key, ()))

    def pop_due_timers(self, now_ms: int) -> list[tuple[int, int, Key]]:
        import heapq

        due: list[tuple[int, int, Key]] = []
        for key_group in self.task.key_groups:
            group = self.groups[key_group]
            heap = group.timer_heap
            table = group.timers.table
            while heap and heap[0][0] <= now_ms:
                timestamp, _, key = heapq.heappop(heap)
                pending = table.get(key)
                if pending is None or timestamp not in pending:
                    continue
                pending.discard(timestamp)
                if not pending:
                    del table[key]
                group.timers.changed.add(key)
                due.append((timestamp, key_group, key))
        due.sort(key=lambda item: (item[0], item[1]))
        return due

    # -- snapshot ---------------------------------------------------------------------------

    def snapshot(self) -> PendingSnapshot:
        task = self.task
        self._group = None
        kind = (
            FULL
            if (task.scope.batch_id - self.first_batch) % self.full_snapshot_every == 0
            else DELTA
        )
        return SnapshotThread(lambda: self._write_snapshot(task, kind))

    def _write_snapshot(self, task: KeyedTask, kind: str) -> None:
        body = BodyWriter(self.descriptors, self.cursor.now_ms)
        write = body.full if kind == FULL else body.delta
        for key_group in task.key_groups:
            write(key_group, self.groups[key_group])
        rows = body.rows
        parents = sorted(
            {self.identity[kg][1] for kg in task.key_groups if kg in self.identity}
            if kind == DELTA
            else set()
        )
        header = {
            "operator": self.spec.name,
            "version": task.scope.batch_id,
            "kind": kind,
            "key_groups": [task.key_groups.start, task.key_groups.end],
            "max_parallelism": self.spec.max_parallelism,
            "key": list(self.spec.key_columns),
            "query_id": task.scope.query_id,
            "parents": parents,
            "rows": len(rows),
            "states": {name: state_record(d) for name, d in self.descriptors.items()},
        }
        data, body_digest = fmt.encode(header, fmt.encode_body(rows.to_table()))
        written = self.storage.write(task.scope.batch_id, task.key_groups, kind, data, body_digest)
        self._written = self._figures(task, kind, len(data))
        self.storage.remove_stale(written)
        for key_group in task.key_groups:
            self.identity[key_group] = (task.scope.batch_id, written.name)
        logger.debug("state: wrote %s (%d rows, %d bytes)", written.path, len(rows), len(data))
        if task.scope.partition_id == 0:
            self._apply_retention(task.scope.batch_id - 1)

    def _figures(self, task: KeyedTask, kind: str, written: int) -> dict[str, float]:
        """The snapshot's figures: a full snapshot is the whole state, a delta only what
        changed, so ``state_bytes`` is known for full ones only."""
        entries = sum(
            len(slot.table)
            for key_group in task.key_groups
            for name, slot in self.groups[key_group].slots.items()
            if not name.startswith("__")
        )
        figures = {"snapshot_bytes": float(written), "state_entries": float(entries)}
        if kind == FULL:
            figures["state_bytes"] = float(written)
        return figures

    def snapshot_metrics(self) -> dict[str, float]:
        return dict(self._written)

    def _apply_retention(self, last_committed: int) -> None:
        oldest_kept = last_committed - self.retain + 1
        if oldest_kept <= self.first_batch:
            return
        steps = (oldest_kept - self.first_batch) // self.full_snapshot_every
        full_base = self.first_batch + steps * self.full_snapshot_every
        dropped = self.storage.drop_versions_before(full_base)
        if dropped:
            logger.info(
                "state: operator %s dropped %d versions before %d",
                self.spec.name,
                dropped,
                full_base,
            )
