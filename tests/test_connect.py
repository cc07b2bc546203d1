"""firesteel from a Spark Connect client: the server started from the PySpark wheel runs
the queries, the client (a process of its own, as a user's) builds them.

One client registers firesteel, starts a files -> files exactly-once query and,
beside it, a keyed-state query restored from a savepoint bootstrapped from a
DataFrame (``restore_from``, which needed a SparkContext before), and is SIGKILLed;
the files query keeps running on the server. A second client, on the same session,
stops it and restarts it from its checkpoint. The output is counted with pyarrow,
not with firesteel.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from firesteel.testing.connect import ConnectServer
from firesteel.testing.counting import assert_exactly_once
from tests.files_helpers import write_input

pytestmark = pytest.mark.slow

CLIENT = Path(__file__).parent / "jobs" / "connect_client.py"
ROWS = 10
"""Rows per input file."""
SAVED = {"k0": 5, "k1": 7, "k2": 9}
"""The counts the client's savepoint starts each key at (``connect_client.SAVED``)."""


def _file(folder: Path, index: int, first: int = 0) -> None:
    seq = list(range(first + index * ROWS, first + (index + 1) * ROWS))
    table = pa.table({"seq": pa.array(seq, pa.int64()), "key": [f"k{s % 3}" for s in seq]})
    write_input(folder, f"part-{index:04d}.parquet", table, "parquet")


def _client(url: str, workdir: Path, step: str, log: IO[bytes]) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_")}
    return subprocess.Popen(
        [sys.executable, str(CLIENT), url, str(workdir), step],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env=env,
        cwd=workdir,
        start_new_session=True,
    )


def _said(lines: list[str]) -> dict[str, Any]:
    said: dict[str, Any] = {}
    for line in lines:
        said.update(json.loads(line))
    return said


def _seqs(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return [int(s) for s in ds.dataset(str(folder)).to_table().column("seq").to_pylist()]


def _ranks(folder: Path) -> dict[str, list[int]]:
    table = ds.dataset(str(folder)).to_table().sort_by("seq")
    found: dict[str, list[int]] = {}
    for key, rank in zip(
        table.column("key").to_pylist(), table.column("rank").to_pylist(), strict=True
    ):
        found.setdefault(key, []).append(rank)
    return found


def test_firesteel_from_a_spark_connect_client(
    connect_server: ConnectServer, tmp_path: Path
) -> None:
    url = f"{connect_server.url}/;session_id={uuid.uuid4()}"
    for index in range(2):
        _file(tmp_path / "in", index)
        _file(tmp_path / "more", index, first=1000)
    with (tmp_path / "client.log").open("wb") as log:
        first = _client(url, tmp_path, "start", log)
        assert first.stdout is not None
        lines: list[str] = []
        while not any('"query"' in line for line in lines):
            line = first.stdout.readline()
            assert line, f"the first client exited: {(tmp_path / 'client.log').read_text()}"
            lines.append(line)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        said = _said(lines)
        assert "firesteel.files" in said["registered"]
        assert "not-a-checkpoint" in said["unseen"], "read_guarantee raises for an unseen path"
        assert "remove withWatermark" in said["event_time"]["refused"], said["event_time"]
        (record,) = said["guarantee"].values()
        assert record["achieved"] == "exactly-once"

        _file(tmp_path / "in", 2)
        deadline = time.monotonic() + 120
        while len(_seqs(tmp_path / "out")) < 3 * ROWS and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len(_seqs(tmp_path / "out")) == 3 * ROWS, "the query stopped with its client"

        (tmp_path / "query.json").write_text(json.dumps({"query": said["query"]}))
        _file(tmp_path / "in", 3)
        second = _client(url, tmp_path, "resume", log)
        out, _ = second.communicate(timeout=300)
    assert second.returncode == 0, (tmp_path / "client.log").read_text()[-4000:]
    assert _said(out.splitlines()) == {"found": True, "done": True}
    assert_exactly_once(_seqs(tmp_path / "out"), range(4 * ROWS), what="files -> files")

    ranks = _ranks(tmp_path / "ranks")
    assert ranks == {
        key: list(range(saved + 1, saved + 1 + len(ranks[key]))) for key, saved in SAVED.items()
    }, "the ranks continue from the savepoint's counts"
