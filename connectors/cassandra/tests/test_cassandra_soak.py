"""The soak command on both exactly-once paths, with the kill cycles CI keeps.

Each cycle adds input, kills the job (a protocol point or a random moment),
and restarts it with a new partition count (1-4) and the checkpoint spelled
otherwise; cassandra-driver counts the table at the end. With the kills of
``test_cassandra_crash.py`` / ``test_cassandra_wal.py`` each path sees 15-20
SIGKILLs per CI run (13 cycles keep the suite inside its 40 minutes);
``python -m firesteel.cassandra.testing.soak`` runs the long loops.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from firesteel.cassandra.testing import HOSTS_ENV
from firesteel.cassandra.testing.soak import FILES_PER_CYCLE, ROWS_PER_FILE, main

CYCLES = 16


@pytest.mark.crash
@pytest.mark.parametrize("mode", ["upsert", "wal"])
def test_soak_command_counts_a_killed_and_restarted_cassandra_pipeline(
    mode: str, cluster_address: tuple[str, int], tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    host, port = cluster_address
    monkeypatch.setenv(HOSTS_ENV, f"{host}:{port}")
    argv = [mode, "--cycles", str(CYCLES), "--seed", "4", "--workdir", str(tmp_path / "soak")]
    code = main(argv)
    report = json.loads(capsys.readouterr().out)
    assert (report["path"], report["cycles"]) == (mode, CYCLES)
    assert report["records"] == CYCLES * FILES_PER_CYCLE * ROWS_PER_FILE
    # A random kill may find its run already finished; most must fire.
    assert report["kills"] >= CYCLES * 2 // 3, report
    assert report["lost"] == report["duplicated"] == report["wrong_body"] == 0, report
    assert code == 0
