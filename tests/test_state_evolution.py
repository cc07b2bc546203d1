"""State schema evolution: a job upgraded across each rule restores every key's state.

Each test writes state with version 1 of a processor's types on a real backend
(heap, filesystem, RocksDB), restores it with version 2 and compares every
key's value state, list state and map state with a reference computed in plain
Python. The incompatible cases are refused before any stored state changes
(every file of the state location hashed before and after). A real query
(the shared Spark session) is upgraded between two runs as well.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pyspark import cloudpickle
from test_state_backends import Driver, make_backend
from test_state_operator import (
    expected_counts,
    latest_counts,
    readings,
    run_query,
    write_inputs,
)

from firesteel.core.errors import ConfigError
from firesteel.state import (
    KeyedProcessor,
    KeyState,
    ListStateDescriptor,
    MapStateDescriptor,
    PickleSerializer,
    ValueStateDescriptor,
)
from firesteel.state.backend import StateDescriptor
from firesteel.state.schemas import OPAQUE, value_schema

# Spark's Python workers cannot import this test module by name: ship it by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

KEYS = [(f"user-{i}",) for i in range(30)]
BACKENDS = ["heap", "filesystem", "rocksdb"]


def _states(value_type: Any, renames: dict[str, str] | None = None) -> list[StateDescriptor]:
    """A value, a list and a map state, all of ``value_type``."""
    return [
        ValueStateDescriptor("profile", value_type, renames=renames),
        ListStateDescriptor("history", value_type, renames=renames),
        MapStateDescriptor("by_day", value_type, renames=renames),
    ]


def _write(descriptors: list[StateDescriptor], make: Callable[[int], Any]) -> Callable[..., None]:
    value, history, by_day = descriptors

    def write(store: Any, key: tuple[Any, ...]) -> None:
        n = int(key[0].split("-")[1])
        store.state(value).update(make(n))
        store.state(history).extend([make(n), make(n + 1)])
        store.state(by_day).put(f"d{n % 3}", make(n + 2))

    return write


def _read(descriptors: list[StateDescriptor]) -> Callable[..., Any]:
    value, history, by_day = descriptors

    def read(store: Any, _: tuple[Any, ...]) -> Any:
        return (
            store.state(value).value(),
            store.state(history).get(),
            dict(store.state(by_day).items()),
        )

    return read


def _expected(make: Callable[[int], Any]) -> dict[tuple[Any, ...], Any]:
    """Plain Python: what every key must hold after the upgrade (keys 10-19 were written in
    both batches of :func:`_upgrade`, so their lists hold two rounds)."""
    return {
        (f"user-{n}",): (
            make(n),
            [make(n), make(n + 1)] * (2 if 10 <= n < 20 else 1),
            {f"d{n % 3}": make(n + 2)},
        )
        for n in range(len(KEYS))
    }


def _upgrade(
    root: Path,
    kind: str,
    old: list[StateDescriptor],
    write_old: Callable[[int], Any],
    new: list[StateDescriptor],
) -> dict[tuple[Any, ...], Any]:
    """Write with ``old`` at parallelism 2 (two batches: a full and a delta snapshot on the
    dict backends), restore with ``new`` at parallelism 3, snapshot, and restore once more."""
    backend = make_backend(kind, root, cache=False, full_snapshot_every=2)
    Driver(backend, 2, old).batch(0, KEYS[:20], _write(old, write_old))
    Driver(backend, 2, old).batch(1, KEYS[10:], _write(old, write_old))
    upgraded = Driver(backend, 3, new).batch(2, KEYS, _read(new))
    again = Driver(backend, 1, new).batch(3, KEYS, _read(new))
    assert again == upgraded
    return upgraded


# -- version 1 and the versions 2 each rule allows -----------------------------------------


@dataclasses.dataclass
class Profile:
    name: str
    visits: int


def _profile(n: int) -> Profile:
    return Profile(f"n{n}", n)


def _scope_v2() -> dict[str, type]:
    """Version 2 of ``Profile`` for each rule (same class name, as a redeployed job has)."""

    @dataclasses.dataclass
    class Profile:  # a field added with a default
        name: str
        visits: int
        country: str = "unknown"

    added = Profile

    @dataclasses.dataclass  # type: ignore[no-redef]
    class Profile:  # a field removed
        visits: int

    removed = Profile

    @dataclasses.dataclass  # type: ignore[no-redef]
    class Profile:  # int -> float
        name: str
        visits: float

    widened = Profile

    @dataclasses.dataclass  # type: ignore[no-redef]
    class Profile:  # name -> label, through renames={"name": "label"}
        label: str
        visits: int

    renamed = Profile

    @dataclasses.dataclass  # type: ignore[no-redef]
    class Profile:  # int -> str: no Avro resolution
        name: str
        visits: str

    incompatible = Profile

    @dataclasses.dataclass  # type: ignore[no-redef]
    class Profile:  # a field added without a default
        name: str
        visits: int
        country: str

    no_default = Profile

    @dataclasses.dataclass  # type: ignore[no-redef]
    class Profile:  # str -> str | None
        name: str | None
        visits: int

    optional = Profile

    @dataclasses.dataclass
    class Visitor:  # the class renamed, through renames={"Profile": "Visitor"}
        name: str
        visits: int

    return {
        "optional": optional,
        "class_renamed": Visitor,
        "added": added,
        "removed": removed,
        "widened": widened,
        "renamed": renamed,
        "incompatible": incompatible,
        "no_default": no_default,
    }


V2 = _scope_v2()
RULES: dict[str, tuple[type, dict[str, str] | None, Callable[[int], Any]]] = {
    "add a field with a default": (V2["added"], None, lambda n: V2["added"](f"n{n}", n)),
    "remove a field": (V2["removed"], None, V2["removed"]),
    "widen int to float": (V2["widened"], None, lambda n: V2["widened"](f"n{n}", float(n))),
    "rename a field": (V2["renamed"], {"name": "label"}, lambda n: V2["renamed"](f"n{n}", n)),
    "make a field optional": (V2["optional"], None, lambda n: V2["optional"](f"n{n}", n)),
    "rename the dataclass": (
        V2["class_renamed"],
        {"Profile": "Visitor"},
        lambda n: V2["class_renamed"](f"n{n}", n),
    ),
}


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("rule", sorted(RULES))
def test_every_key_restores_across_each_evolution_rule(
    tmp_path: Path, kind: str, rule: str
) -> None:
    new_type, renames, expected = RULES[rule]
    upgraded = _upgrade(
        tmp_path, kind, _states(Profile), _profile, _states(new_type, renames=renames)
    )
    assert upgraded == _expected(expected)
    visits = [v[0].visits for v in upgraded.values()]
    if rule == "widen int to float":
        assert all(isinstance(v, float) for v in visits)


@pytest.mark.parametrize("kind", BACKENDS)
def test_plain_numbers_widen_int32_to_int64_to_float(tmp_path: Path, kind: str) -> None:
    upgraded = _upgrade(tmp_path, kind, _states(np.int32), np.int32, _states(int))
    assert upgraded == _expected(int)
    upgraded = _upgrade(tmp_path / "2", kind, _states(int), int, _states(float))
    assert upgraded == _expected(float)
    assert all(isinstance(v[0], float) for v in upgraded.values())


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_type_taken_from_a_state_gives_the_stored_values_as_they_are(
    tmp_path: Path, kind: str
) -> None:
    upgraded = _upgrade(tmp_path, kind, _states(Profile), _profile, _states(None))
    assert upgraded == _expected(lambda n: dataclasses.asdict(_profile(n)))


@pytest.mark.parametrize("kind", BACKENDS)
def test_an_evolved_state_keeps_each_entry_expiry(tmp_path: Path, kind: str) -> None:
    """TTL state widened from int to float: values converted, each one's expiry (set when it
    was written, not when it was converted) kept."""
    old = ValueStateDescriptor("level", int, ttl=10.0)
    new = ValueStateDescriptor("level", float, ttl=10.0)
    backend = make_backend(kind, tmp_path, cache=False)
    Driver(backend, 1, [old]).batch(
        0, KEYS[:10], lambda s, k: s.state(old).update(len(k[0])), now_ms=1_000
    )
    Driver(backend, 1, [old]).batch(
        1, KEYS[10:], lambda s, k: s.state(old).update(len(k[0])), now_ms=6_000
    )
    read = Driver(backend, 2, [new]).batch(2, KEYS, lambda s, _: s.state(new).value(), 8_000)
    assert read == {key: float(len(key[0])) for key in KEYS}
    assert all(isinstance(value, float) for value in read.values())
    # The first ten were written at 1 s and expire at 11 s; the rest live until 16 s.
    later = Driver(backend, 2, [new]).batch(3, KEYS, lambda s, _: s.state(new).value(), 12_000)
    assert later == {key: (None if key in KEYS[:10] else float(len(key[0]))) for key in KEYS}


def _tree(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize(
    ("new", "why"),
    [
        (lambda: _states(V2["incompatible"]), "reader type: string not compatible with writer"),
        (lambda: _states(V2["no_default"]), "country"),
        (lambda: _states(int), "not compatible"),
        (lambda: _states(V2["class_renamed"]), "expected: Profile (at /, /name)"),
    ],
    ids=["int to str", "added without default", "record to number", "class renamed unmapped"],
)
def test_an_incompatible_change_is_refused_before_any_state_is_touched(
    tmp_path: Path, kind: str, new: Callable[[], list[StateDescriptor]], why: str
) -> None:
    backend = make_backend(kind, tmp_path, cache=False)
    old = _states(Profile)
    Driver(backend, 2, old).batch(0, KEYS, _write(old, _profile))
    stored = tmp_path / {"heap": "heap", "filesystem": "fs", "rocksdb": "rocksdb"}[kind]
    before = _tree(stored)
    with pytest.raises(ConfigError) as refused:
        Driver(backend, 2, new()).batch(1, KEYS, lambda s, _: None)
    message = str(refused.value)
    assert why in message
    assert re.search(r"state '(profile|history|by_day)' in \S+ was written as", message)
    assert '"name": "Profile"' in message.split("is declared as", maxsplit=1)[0]  # the old type
    assert "is declared as" in message
    assert "Fix:" in message and "ctx.drop_state(" in message
    assert _tree(stored) == before
    # The old version still restores every key.
    assert Driver(backend, 2, old).batch(1, KEYS[20:], _read(old)) == {
        key: value for key, value in _expected(_profile).items() if key in KEYS[20:]
    }


def test_pickled_state_says_it_cannot_evolve(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="firesteel.state.descriptors"):
        old = ValueStateDescriptor("blob", Profile, serializer=PickleSerializer())
    assert "state 'blob' is pickled: its type cannot evolve" in caplog.text
    backend = make_backend("filesystem", tmp_path, cache=False)
    Driver(backend, 1, [old]).batch(0, KEYS[:3], lambda s, k: s.state(old).update(_profile(1)))
    new = ValueStateDescriptor("blob", V2["added"], serializer=PickleSerializer())
    with pytest.raises(ConfigError, match="serializer 'pickle' cannot evolve"):
        Driver(backend, 1, [new]).batch(1, KEYS[:3], lambda s, _: None)
    seen = Driver(backend, 1, [old]).batch(1, KEYS[:3], lambda s, _: s.state(old).value())
    assert list(seen.values()) == [_profile(1)] * 3


@dataclasses.dataclass
class Inner:
    tags: list[str]
    scores: dict[str, float]


@dataclasses.dataclass
class Outer:
    inner: Inner
    note: str | None = None
    count: np.int32 = dataclasses.field(default_factory=lambda: np.int32(0))


def test_types_become_avro_schemas() -> None:
    assert value_schema(Outer, {"old_note": "note"}) == {
        "type": "record",
        "name": "Outer",
        "fields": [
            {
                "name": "inner",
                "type": {
                    "type": "record",
                    "name": "Inner",
                    "fields": [
                        {"name": "tags", "type": {"type": "array", "items": "string"}},
                        {"name": "scores", "type": {"type": "map", "values": "double"}},
                    ],
                },
            },
            {"name": "note", "type": ["null", "string"], "default": None, "aliases": ["old_note"]},
            {"name": "count", "type": "int", "default": 0},
        ],
    }
    assert value_schema(None) is None
    assert value_schema(set) == {OPAQUE: "builtins.set"}
    json.dumps(value_schema(Outer))


def test_checkpoints_record_each_state_schema(tmp_path: Path) -> None:
    backend = make_backend("rocksdb", tmp_path, cache=False)
    old = _states(Profile)
    Driver(backend, 1, old).batch(0, KEYS[:2], _write(old, _profile))
    manifest = next((tmp_path / "rocksdb" / "op").rglob("v*/*.json"))
    states = json.loads(manifest.read_text())["content"]["states"]
    assert json.loads(states["profile"]["schema"]) == value_schema(Profile)


# -- a real query upgraded between two runs ------------------------------------------------


@dataclasses.dataclass
class Tally:
    count: int


def _tally_v2() -> type:
    @dataclasses.dataclass
    class Tally:  # count widened to float, total added with a default
        count: float
        total: float = 0.0

    return Tally


TALLY_V2 = _tally_v2()


class TallyV1(KeyedProcessor):
    tally = ValueStateDescriptor("tally", Tally)

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        tally = state.value(self.tally)
        current = tally.value() or Tally(0)
        tally.update(Tally(current.count + rows.num_rows))
        yield {"sensor": key[0], "count": current.count + rows.num_rows, "total": 0.0}


class TallyV2(KeyedProcessor):
    tally = ValueStateDescriptor("tally", TALLY_V2)

    def process(self, key: Any, rows: Any, state: KeyState) -> Any:
        tally = state.value(self.tally)
        current = tally.value() or TALLY_V2(0.0)
        total = current.total + sum(rows.column("value").to_pylist())
        tally.update(TALLY_V2(current.count + rows.num_rows, total))
        yield {"sensor": key[0], "count": int(current.count) + rows.num_rows, "total": total}


def test_a_query_upgraded_between_runs_keeps_counting(spark: Any, tmp_path: Path) -> None:
    """Version 1 of a job counts per key; version 2, restarted on its state at another
    parallelism, widens the count to float and adds a total with a default: every key's
    count goes on from where version 1 left it, its total starts at the default."""
    src = tmp_path / "in"
    first = [readings(b) for b in range(2)]
    write_inputs(src, first)
    run_query(spark, src, tmp_path, TallyV1(), parallelism=2, files_per_batch=2)
    second = [readings(b) for b in range(2, 4)]
    write_inputs(src, second, start=1000)
    run_query(spark, src, tmp_path, TallyV2(), parallelism=3, files_per_batch=2)
    counts = expected_counts(first + second)
    totals = expected_counts(second)
    assert latest_counts(tmp_path) == {
        sensor: (count, totals.get(sensor, (0, 0.0))[1]) for sensor, (count, _) in counts.items()
    }


@dataclasses.dataclass
class _Unresolvable:
    """As a job's ``__main__`` dataclass looks on a Spark worker: its string annotation
    names an import the worker's process lacks."""

    last_seen: missing_module.Moment  # type: ignore[name-defined]  # noqa: F821


def test_a_dataclass_whose_annotations_cannot_be_resolved_is_opaque_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="firesteel.state.schemas"):
        schema = value_schema(_Unresolvable)
    assert schema == {OPAQUE: f"{__name__}._Unresolvable"}
    assert "annotations cannot be resolved" in caplog.text
    assert "missing_module" in caplog.text
