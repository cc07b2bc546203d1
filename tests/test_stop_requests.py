"""``firesteel savepoint stop``'s requests and answers (:mod:`firesteel.core.control`), without
Spark: the command against a checkpoint no driver watches, and the two sides of the protocol.
The running query stopped by the command, run in a process of its own, is in
``test_savepoint_jobs``."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from firesteel.cli.main import main
from firesteel.core.control import (
    ControlTimeoutError,
    answer_stop,
    pending_stop,
    request_stop,
    take_stop,
    wait_for_answer,
)
from firesteel.core.errors import ConfigError


def checkpoint(tmp_path: Path) -> str:
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "metadata").write_text(json.dumps({"id": "q-1"}) + "\n")
    return str(tmp_path / "ck")


def test_the_command_names_what_it_waited_for_and_withdraws_its_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    location = checkpoint(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["savepoint", "stop", location, "--to", str(tmp_path / "sp"), "--timeout", "0.5"])
    assert exited.value.code == 1
    said = capsys.readouterr().err
    assert "no answer to stop request" in said
    assert f"{location}/firesteel/control/stop-" in said
    assert "no driver took the request (withdrawn)" in said
    # A query started later must not stop on a request nobody answered.
    assert pending_stop(location) is None
    with pytest.raises(SystemExit) as exited:
        main(["savepoint", "stop", str(tmp_path / "nothing"), "--to", str(tmp_path / "sp")])
    assert exited.value.code == 1
    assert "is not a Spark checkpoint" in capsys.readouterr().err


def test_a_request_is_taken_once_and_answered(tmp_path: Path) -> None:
    location = checkpoint(tmp_path)
    request = request_stop(location, "/savepoints/a")
    with pytest.raises(ConfigError, match=f"stop request {request.id} .* still waiting"):
        request_stop(location, "/savepoints/b")

    def driver() -> None:
        # What the driver's listener does after a batch: read, take, act, answer.
        seen = pending_stop(location)
        assert seen == request
        take_stop(location, seen)
        time.sleep(0.3)
        answer_stop(location, seen, batch=7)

    thread = threading.Thread(target=driver)
    thread.start()
    answer = wait_for_answer(location, request, timeout_seconds=30)
    thread.join()
    assert (answer.id, answer.batch, answer.savepoint, answer.error) == (
        request.id,
        7,
        "/savepoints/a",
        None,
    )
    assert pending_stop(location) is None
    # Taken but unanswered: the timeout says the driver has it, and leaves it alone.
    second = request_stop(location, "/savepoints/c")
    take_stop(location, second)
    with pytest.raises(ControlTimeoutError, match="the driver took the request"):
        wait_for_answer(location, second, timeout_seconds=0.3)
