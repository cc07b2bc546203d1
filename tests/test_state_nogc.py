"""The collector around an operator task (:mod:`firesteel.state.nogc`): paused inside, the
task's cycles collected and what is left frozen after, every object collected again at the
full collection."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from firesteel.state import nogc


class Node:
    """An object that can be part of a reference cycle."""

    def __init__(self) -> None:
        self.other: Node | None = None


def cycle(holder: list[Node] | None = None) -> weakref.ref[Node]:
    """A cycle of two nodes, watched through a weak reference: garbage unless ``holder``
    keeps it."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    if holder is not None:
        holder.append(a)
    return weakref.ref(a)


@pytest.fixture
def fresh_collector() -> Iterator[None]:
    gc.collect()
    ran = nogc._tasks["run"]
    nogc._tasks["run"] = 0
    yield
    nogc._tasks["run"] = ran
    gc.unfreeze()
    gc.enable()


def test_the_collector_is_paused_in_a_task_and_frees_the_task_s_cycles_after(
    fresh_collector: None,
) -> None:
    held = [Node() for _ in range(100)]  # old objects: frozen after the task
    with nogc.operator_task():
        assert not gc.isenabled()
        made = cycle()
        for _ in range(10_000):  # enough allocations to start a young collection, if on
            Node()
        assert made() is not None
    assert gc.isenabled()
    assert made() is None
    assert gc.get_freeze_count() >= len(held)
    gc.collect()  # a full collection (PySpark's, after every task) walks none of them
    assert gc.get_freeze_count() >= len(held)


def test_a_cycle_of_frozen_objects_waits_for_the_full_collection(fresh_collector: None) -> None:
    holder: list[Node] = []
    old = cycle(holder)
    with nogc.operator_task():
        pass
    holder.clear()
    # Frozen before it became garbage: PySpark's collections after the next tasks skip it.
    assert old() is not None
    gc.collect()
    assert old() is not None
    for _ in range(nogc.FULL_EVERY - 2):
        with nogc.operator_task():
            pass
        assert old() is not None
    with nogc.operator_task():  # the FULL_EVERY-th task of the process
        pass
    assert old() is None
