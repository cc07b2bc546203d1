"""The soak command itself, one cycle: it feeds input, kills the job, restarts it and counts.

The kills CI gives the Cassandra paths are in ``test_cassandra_wal.py`` (upsert,
write-ahead log and map puts in one driver): eight SIGKILLs of the whole job and
twelve task kills of each; ``python -m firesteel.testing.cassandra.soak``
runs either path for as many cycles as wanted, with a new partition count (1-4)
and the checkpoint spelled otherwise at every restart.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from firesteel.testing.cassandra import HOSTS_ENV
from firesteel.testing.cassandra.soak import FILES_PER_CYCLE, ROWS_PER_FILE, main


@pytest.mark.crash
@pytest.mark.soak
def test_soak_command_counts_a_killed_and_restarted_cassandra_pipeline(
    cluster_address: tuple[str, int], tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    host, port = cluster_address
    monkeypatch.setenv(HOSTS_ENV, f"{host}:{port}")
    argv = ["wal", "--cycles", "1", "--seed", "4", "--workdir", str(tmp_path / "soak")]
    code = main(argv)
    report = json.loads(capsys.readouterr().out)
    assert (report["path"], report["cycles"]) == ("wal", 1)
    assert report["records"] == FILES_PER_CYCLE * ROWS_PER_FILE
    assert report["kills"] == 1, report
    assert report["lost"] == report["duplicated"] == report["wrong_body"] == 0, report
    # Counted from the test server's writes per row: the table alone shows no re-send.
    assert report["rewritten_beyond_kills"] == 0, report
    assert code == 0
