"""The heap family of state backends: keyed state as Python objects in the workers' memory.

* :mod:`~firesteel.backends.heap.states` -- the state objects and the
  per-key-group dict tables behind them, with change tracking;
* :mod:`~firesteel.backends.heap.rows` -- those tables to and from snapshot rows
  (full and delta);
* :mod:`~firesteel.backends.heap.store` -- the per-worker keyed store: restore,
  snapshot, reuse between batches;
* :mod:`~firesteel.backends.heap.backends` -- :class:`FilesystemBackend` and
  :class:`HeapBackend`, which differ only in where snapshots go.
"""
