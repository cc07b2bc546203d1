"""The Kafka soak command: a run paused in one sitting goes on in the next, on its broker.

The one soak-in-CI test of the Kafka soak command (the default exactly-once path,
``map-write-ahead``): its two sittings count the records as a one-sitting run does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from firesteel.testing.kafka import BOOTSTRAP_ENV

pytestmark = [pytest.mark.crash, pytest.mark.soak, pytest.mark.timeout(900)]


def test_a_paused_soak_resumes_on_its_restarted_broker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from firesteel.testing.kafka.soak import RECORDS_PER_CYCLE, main

    # The soak starts (and restarts) its own broker, not the suite's.
    monkeypatch.delenv(BOOTSTRAP_ENV, raising=False)
    workdir = str(tmp_path / "soak")
    first = ["map-write-ahead", "--cycles", "2", "--minutes", "0", "--pause", "--seed", "3"]
    code = main([*first, "--workdir", workdir])
    paused = json.loads(capsys.readouterr().out)
    assert (code, paused["paused"], paused["cycles"], paused["of"]) == (3, True, 1, 2)

    resume = ["map-write-ahead", "--resume", "--workdir", workdir]
    code = main(resume)
    report = json.loads(capsys.readouterr().out)
    # The first sitting's input and output were on the broker it stopped: none is lost.
    assert (report["path"], report["cycles"], report["legs"]) == ("map-write-ahead", 2, 2)
    assert report["kills"] >= 1
    assert report["records"] == 2 * RECORDS_PER_CYCLE
    assert report["lost"] == report["duplicated"] == report["unexpected"] == 0
    assert code == 0
