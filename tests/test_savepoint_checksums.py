"""A damaged savepoint is never read: one byte flipped anywhere in its files is refused.

A savepoint of several row groups and several checksum blocks is written with
the savepoint writer, and one byte of a copy is flipped (XOR 0x5A) at each class
of position of its Parquet file (the leading magic, the middle of every column
chunk of every row group, the footer's metadata, its length and its trailing
magic) and in its copy of Spark's offsets. Every reader must refuse the copy
with a :class:`CheckpointCorruptError` naming the file and the checksum: a
task restoring from it (``restore_from``), :func:`read_savepoint`, and
:func:`rewrite` (whose input savepoint it is). The restore and the rewrite are
driven directly, without Spark: the refusal comes from the savepoint's reader,
whatever drives it.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from firesteel.backends.savepoint import read_savepoint
from firesteel.core.context import TaskScope
from firesteel.core.errors import CheckpointCorruptError
from firesteel.state import ValueStateDescriptor
from firesteel.state.backend import KeyedTask, OperatorSpec
from firesteel.state.clock import CLOCK
from firesteel.state.keygroups import KeyGroupRange
from firesteel.state.savepoint import SavepointRestore, open_savepoint, rewrite
from firesteel.state.savepoint.format import ROWS_SCHEMA, OperatorRows, write_savepoint
from firesteel.state.savepoint.restore import declarations
from firesteel.state.serializers import pack, pack_key, unpack
from tests.test_state_backends import make_backend

BLOB = ValueStateDescriptor("blob", bytes)
MAX_P = 16
ROWS = 70_000
"""More than one 64k-row group; 24 random bytes a value make the file two checksum blocks."""
OFFSETS = b'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n{"logOffset":4}'


def _rows() -> pa.Table:
    rng = random.Random(47)
    groups = sorted(rng.randrange(MAX_P) for _ in range(ROWS))
    return pa.table(
        {
            "key_group": groups,
            "key": [pack_key((f"k{i}",)) for i in range(ROWS)],
            "state": ["blob"] * ROWS,
            "user_key": [None] * ROWS,
            "value": [pack(rng.randbytes(24)) for _ in range(ROWS)],
            "expires_ms": [None] * ROWS,
        },
        schema=ROWS_SCHEMA,
    )


@pytest.fixture(scope="module")
def intact(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pa.Table]:
    """A savepoint of batch 3 with Spark's offsets, and the rows it holds."""
    target = tmp_path_factory.mktemp("intact") / "savepoint"
    rows = _rows()
    part = OperatorRows(
        key_columns=["k"],
        max_parallelism=MAX_P,
        states={"blob": {"kind": "value", "serializer": "msgpack", "schema": '"bytes"'}},
        rows=rows,
    )
    write_savepoint(
        str(target), batch=3, operators={"op": part}, offsets=OFFSETS, origin={"test": True}
    )
    return target, rows


def _positions(parquet: Path) -> dict[str, list[int]]:
    """Byte offsets of each class of position in a Parquet file, read from its own footer."""
    size = parquet.stat().st_size
    metadata = pq.ParquetFile(parquet).metadata
    footer_length = int.from_bytes(parquet.read_bytes()[-8:-4], "little")
    positions: dict[str, list[int]] = {
        "leading magic": [1],
        "footer metadata": [size - 8 - footer_length // 2],
        "footer length": [size - 8],
        "trailing magic": [size - 2],
    }
    assert metadata.num_row_groups >= 2
    for column in range(metadata.num_columns):
        name = metadata.schema.column(column).name
        positions[f"column chunk {name}"] = []
        for group in range(metadata.num_row_groups):
            chunk = metadata.row_group(group).column(column)
            start = chunk.dictionary_page_offset or chunk.data_page_offset
            positions[f"column chunk {name}"].append(start + chunk.total_compressed_size // 2)
    return positions


def _flipped(intact: Path, tmp_path: Path, relative: str, offset: int) -> Path:
    copy = tmp_path / "damaged"
    shutil.copytree(intact, copy)
    path = copy / relative
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))
    return copy


def _by_group(rows: pa.Table) -> dict[int, list[tuple[Any, ...]]]:
    """The keys of each key group."""
    keys: dict[int, list[tuple[Any, ...]]] = {}
    for key_group, key in zip(
        rows.column("key_group").to_pylist(), rows.column("key").to_pylist(), strict=True
    ):
        keys.setdefault(key_group, []).append(tuple(unpack(key)))
    return keys


def _restore(savepoint: Path, tmp_path: Path, rows: pa.Table) -> dict[bytes, Any]:
    """Every task of a new query's first batch (parallelism 2) loads the savepoint; the
    value each key of ``rows`` holds then."""
    backend = make_backend("heap", tmp_path / "state", cache=False)
    spec = OperatorSpec("op", ("k",), MAX_P, 2)
    restore = SavepointRestore(str(savepoint)).check(spec)
    keys = _by_group(rows)
    loaded: dict[bytes, Any] = {}
    for partition in range(spec.parallelism):
        key_groups = KeyGroupRange.for_partition(partition, spec.parallelism, MAX_P)
        task = KeyedTask(TaskScope("q", 0, partition, 0), key_groups)
        states = declarations(restore, [BLOB, CLOCK], ())
        store = backend.open_store(spec, task, states, 1_000)
        restore.apply(store, spec, task, states)
        for key_group in key_groups:
            for key in keys.get(key_group, []):
                store.set_current_key(key, key_group)
                loaded[pack_key(key)] = store.state(BLOB).value()
    return loaded


def test_an_intact_savepoint_reads_and_restores_every_row(
    intact: tuple[Path, pa.Table], tmp_path: Path
) -> None:
    target, rows = intact
    expected = {
        key: unpack(value)
        for key, value in zip(
            rows.column("key").to_pylist(), rows.column("value").to_pylist(), strict=True
        )
    }
    assert _restore(target, tmp_path, rows) == expected
    assert len(read_savepoint(str(target))) == ROWS
    assert open_savepoint(str(target)).offsets() == OFFSETS


def _parquet(target: Path) -> str:
    return str(next(target.glob("op/*.parquet")).relative_to(target))


@pytest.mark.parametrize(
    "where",
    [
        "leading magic",
        *(f"column chunk {name}" for name in ROWS_SCHEMA.names),
        "footer metadata",
        "footer length",
        "trailing magic",
    ],
)
def test_one_byte_flipped_in_the_parquet_file_is_refused_by_every_reader(
    intact: tuple[Path, pa.Table], tmp_path: Path, where: str
) -> None:
    target, rows = intact
    relative = _parquet(target)
    refusal = rf"savepoint .*: {relative} .*checksum.*damaged"
    for offset in _positions(target / relative)[where]:
        damaged = _flipped(target, tmp_path / str(offset), relative, offset)
        with pytest.raises(CheckpointCorruptError, match=refusal):
            _restore(damaged, tmp_path / str(offset), rows)
        with pytest.raises(CheckpointCorruptError, match=refusal):
            read_savepoint(str(damaged))
        with pytest.raises(CheckpointCorruptError, match=refusal):
            rewrite(
                str(damaged),
                [],
                str(tmp_path / str(offset) / "rewritten"),
                operator="op",
                states=[BLOB],
            )
        assert not (tmp_path / str(offset) / "rewritten").exists()


def test_one_byte_flipped_in_the_offsets_is_refused(
    intact: tuple[Path, pa.Table], tmp_path: Path
) -> None:
    target, _ = intact
    damaged = _flipped(target, tmp_path, "offsets/3", 20)
    refusal = r"savepoint .*: offsets/3 .*checksum.*damaged"
    with pytest.raises(CheckpointCorruptError, match=refusal):
        open_savepoint(str(damaged)).offsets()
    with pytest.raises(CheckpointCorruptError, match=refusal):
        rewrite(str(damaged), [], str(tmp_path / "rewritten"), operator="op", states=[BLOB])
